//! Reading mapping files at the edge: paths and folders given with `--mapping` become texts for
//! the compiler ([`crate::mapping::compile`]), which itself never touches the file system.
//!
//! A folder stands for every `*.toml` file directly in it (sorted by name; names starting with
//! `.` are skipped). A file given twice is read once. Problems reading are reported together
//! with the compiler's, so one run shows everything wrong.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::mapping::{Mapping, MappingError, MappingErrorKind, MappingErrors, MappingText};

/// Reads and compiles mapping files and folders of them.
pub fn load(paths: &[PathBuf]) -> Result<Mapping, MappingErrors> {
    let (texts, errors) = read(paths);
    crate::mapping::compile(texts, errors)
}

/// The texts of every mapping file named by `paths`, and the problems met reading them.
pub fn read(paths: &[PathBuf]) -> (Vec<MappingText>, Vec<MappingError>) {
    let mut errors = Vec::new();
    let mut files: Vec<PathBuf> = Vec::new();
    for path in paths {
        match fs::metadata(path) {
            Ok(meta) if meta.is_dir() => match fs::read_dir(path) {
                Ok(entries) => {
                    let mut found: Vec<PathBuf> = entries
                        .filter_map(Result::ok)
                        .map(|e| e.path())
                        .filter(|p| {
                            p.extension().is_some_and(|x| x == "toml")
                                && p.file_name().is_some_and(|n| !n.to_string_lossy().starts_with('.'))
                                && p.is_file()
                        })
                        .collect();
                    found.sort();
                    if found.is_empty() {
                        errors.push(MappingError::unreadable(
                            path,
                            MappingErrorKind::NoTomlFiles { folder: path.clone() },
                        ));
                    }
                    files.extend(found);
                }
                Err(e) => errors.push(MappingError::unreadable(path, MappingErrorKind::Io { message: e.to_string() })),
            },
            Ok(_) => files.push(path.clone()),
            Err(e) => errors.push(MappingError::unreadable(path, MappingErrorKind::Io { message: e.to_string() })),
        }
    }
    let mut seen = BTreeSet::new();
    files.retain(|p| seen.insert(fs::canonicalize(p).unwrap_or_else(|_| p.clone())));
    let mut texts = Vec::new();
    for file in files {
        match read_text(&file) {
            Ok(text) => texts.push(MappingText { path: file, text }),
            Err(kind) => errors.push(MappingError::unreadable(&file, kind)),
        }
    }
    if paths.is_empty() {
        errors.push(MappingError::unreadable(Path::new(""), MappingErrorKind::NoFiles));
    }
    (texts, errors)
}

/// One file as UTF-8 text.
pub fn read_text(file: &Path) -> Result<String, MappingErrorKind> {
    match fs::read(file) {
        Ok(bytes) => {
            String::from_utf8(bytes).map_err(|_| MappingErrorKind::Io { message: "the file is not UTF-8 text".into() })
        }
        Err(e) => Err(MappingErrorKind::Io { message: e.to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::UnmappedPolicy;

    #[test]
    fn load_reads_folders_sorted_and_skips_others() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("b.toml"), "[entity.B]\n").unwrap();
        fs::write(dir.path().join("a.toml"), "[settings]\nunmapped = \"drop\"\n[entity.A]\n").unwrap();
        fs::write(dir.path().join(".hidden.toml"), "not toml at all [").unwrap();
        fs::write(dir.path().join("notes.txt"), "not toml at all [").unwrap();
        let a = dir.path().join("a.toml");
        let m = load(&[dir.path().to_owned(), a.clone()]).unwrap();
        assert_eq!(m.files, vec![a, dir.path().join("b.toml")], "a.toml given twice is read once");
        let tables: Vec<&str> = m.entities.iter().map(|e| e.table.as_str()).collect();
        assert_eq!(tables, ["a", "b"]);
        assert!(m.entities.iter().all(|e| e.unmapped == UnmappedPolicy::Drop), "settings apply to every file");
    }

    #[test]
    fn load_reports_unreadable_paths() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        fs::create_dir(&empty).unwrap();
        let missing = dir.path().join("missing.toml");
        let binary = dir.path().join("binary.toml");
        fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
        let e = load(&[empty.clone(), missing.clone(), binary.clone()]).unwrap_err();
        let got: Vec<(&Path, bool)> = e.0.iter().map(|e| (e.file.as_path(), e.position.is_none())).collect();
        assert_eq!(got, [(empty.as_path(), true), (missing.as_path(), true), (binary.as_path(), true)]);
        assert!(matches!(e.0[0].kind, MappingErrorKind::NoTomlFiles { .. }));
        assert!(matches!(e.0[1].kind, MappingErrorKind::Io { .. }));
        assert_eq!(e.0[2].kind, MappingErrorKind::Io { message: "the file is not UTF-8 text".into() });
        assert!(matches!(load(&[]).unwrap_err().0[0].kind, MappingErrorKind::NoFiles));
    }
}
