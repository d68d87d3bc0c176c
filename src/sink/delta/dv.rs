//! Deletion vectors of etl's Delta tables (`--deletion-vectors`): a MERGE marks the rows of the
//! changed keys deleted in a data file's deletion vector instead of rewriting the file.
//!
//! A table takes them when its `delta.enableDeletionVectors` property is `true` (then its
//! protocol is reader 3 / writer 7 with the `deletionVectors` feature, which deltalake sets with
//! the property). The vectors are written with the Delta kernel's writer and read back with its
//! reader, which checks the file's version byte, each vector's size, magic number and CRC: one
//! file per commit (`deletion_vector_<uuid>.bin` in the table's folder, named in each `add` by
//! the UUID's Z85 form, storage type `u`), holding one vector per file the commit marks.
//! This module never commits: [`super::merge`] puts the descriptors into its `add` actions.

use std::fs;
use std::future::IntoFuture as _;
use std::path::Path;
use std::sync::Arc;

use buoyant_kernel::actions::deletion_vector::DeletionVectorDescriptor as KernelDescriptor;
use buoyant_kernel::actions::deletion_vector_writer::{KernelDeletionVector, StreamingDeletionVectorWriter};
use buoyant_kernel::{DeltaResult, FileMeta, FileSlice, StorageHandler};
use bytes::Bytes;
use deltalake::DeltaTable;
use deltalake::kernel::{DeletionVectorDescriptor, StorageType};
use roaring::RoaringTreemap;
use url::Url;

use super::{Home, sync};
use crate::sink::SinkError;

/// The table property that lets writers mark rows deleted instead of rewriting files.
pub const ENABLE: &str = "delta.enableDeletionVectors";

/// Whether the table's latest version takes deletion vectors (its `delta.enableDeletionVectors`).
pub fn enabled(table: &DeltaTable) -> bool {
    table.snapshot().is_ok_and(|s| s.table_config().enable_deletion_vectors == Some(true))
}

/// The URL the kernel resolves a vector's relative path against: the table's folder, whatever
/// store it is in (the bytes are fetched through [`Home`]).
fn parent() -> Result<Url, String> {
    Url::parse("etl-table:///").map_err(|e| e.to_string())
}

/// The bytes of one deletion-vector file, handed to the kernel's reader.
struct Fetched(Bytes);

impl StorageHandler for Fetched {
    fn list_from(&self, _: &Url) -> DeltaResult<Box<dyn Iterator<Item = DeltaResult<FileMeta>>>> {
        Err(buoyant_kernel::Error::generic("etl hands the kernel one deletion-vector file, nothing to list"))
    }

    fn read_files(&self, files: Vec<FileSlice>) -> DeltaResult<Box<dyn Iterator<Item = DeltaResult<Bytes>>>> {
        let bytes = self.0.clone();
        Ok(Box::new(files.into_iter().map(move |_| Ok(bytes.clone()))))
    }

    fn copy_atomic(&self, _: &Url, _: &Url) -> DeltaResult<()> {
        Err(buoyant_kernel::Error::generic("read only"))
    }

    fn put(&self, _: &Url, _: Bytes, _: bool) -> DeltaResult<()> {
        Err(buoyant_kernel::Error::generic("read only"))
    }

    fn head(&self, _: &Url) -> DeltaResult<FileMeta> {
        Err(buoyant_kernel::Error::generic("etl hands the kernel one deletion-vector file, nothing to look up"))
    }

    fn delete(&self, _: &Url) -> DeltaResult<()> {
        Err(buoyant_kernel::Error::generic("read only"))
    }
}

/// The rows `dv` marks deleted in a data file of the table at `home`. `Ok(Err(reason))` when it
/// cannot be read (a vector stored at an absolute path, a damaged or missing file): the caller
/// then does without it.
pub fn read(home: &Home, dv: &DeletionVectorDescriptor) -> Result<Result<RoaringTreemap, String>, SinkError> {
    let kernel = match KernelDescriptor::try_from(dv.clone()) {
        Ok(k) => k,
        Err(e) => return Ok(Err(format!("a deletion vector etl cannot read: {e}"))),
    };
    let parent = match parent() {
        Ok(p) => p,
        Err(e) => return Ok(Err(e)),
    };
    let bytes = match kernel.absolute_path(&parent) {
        Ok(None) => Bytes::new(),
        Ok(Some(url)) => {
            let Some(rel) = url.as_str().strip_prefix(parent.as_str()) else {
                return Ok(Err(format!("a deletion vector outside the table (`{url}`)")));
            };
            match crate::store::io_runtime().block_on(home.read(rel))? {
                Some(b) => b,
                None => return Ok(Err(format!("deletion vector file `{rel}` is missing"))),
            }
        }
        Err(e) => return Ok(Err(format!("a deletion vector etl cannot read: {e}"))),
    };
    Ok(kernel.read(Arc::new(Fetched(bytes)), &parent).map_err(|e| format!("deletion vector: {e}")))
}

/// `table` with `delta.enableDeletionVectors` set (one commit; deltalake raises the protocol to
/// reader 3 / writer 7 with the `deletionVectors` feature), or as it is when it has it.
pub fn enable(table: DeltaTable) -> Result<DeltaTable, deltalake::DeltaTableError> {
    if enabled(&table) {
        return Ok(table);
    }
    let properties = std::collections::HashMap::from([(ENABLE.to_owned(), "true".to_owned())]);
    crate::store::io_runtime().block_on(table.set_tbl_properties().with_properties(properties).into_future())
}

/// Writes `vectors` into one new deletion-vector file of the table at `home`; returns each
/// one's descriptor, in order, and the file's size.
pub fn write(
    home: &Home,
    scratch: &Path,
    vectors: &[RoaringTreemap],
) -> Result<(Vec<DeletionVectorDescriptor>, u64), SinkError> {
    let id = uuid::Uuid::new_v4();
    let name = format!("deletion_vector_{id}.bin");
    let path = home.write_dir(scratch).join(&name);
    let failed = |e: buoyant_kernel::Error| SinkError::io("write", &path)(std::io::Error::other(e.to_string()));
    let mut buf = Vec::new();
    let mut writer = StreamingDeletionVectorWriter::new(&mut buf);
    let mut descriptors = Vec::with_capacity(vectors.len());
    for v in vectors {
        let mut dv = KernelDeletionVector::new();
        dv.add_deleted_row_indexes(v.iter());
        let written = writer.write_deletion_vector(dv).map_err(failed)?;
        descriptors.push(DeletionVectorDescriptor {
            storage_type: StorageType::UuidRelativePath,
            path_or_inline_dv: z85::encode(id.as_bytes()),
            offset: Some(written.offset),
            size_in_bytes: written.size_in_bytes,
            cardinality: written.cardinality,
        });
    }
    writer.finalize().map_err(failed)?;
    fs::write(&path, &buf).map_err(SinkError::io("write", &path))?;
    sync(&path)?;
    home.place(&path, &name)?;
    Ok((descriptors, buf.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_written_are_read_back_each_from_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::Dir(dir.path().to_owned());
        let small: RoaringTreemap = [0u64, 5, 700].into_iter().collect();
        // Past 2^32 rows and more than one container: the 64-bit layout.
        let wide: RoaringTreemap = (0..70_000u64).step_by(3).chain([u64::from(u32::MAX) + 2]).collect();
        let (descriptors, bytes) = write(&home, dir.path(), &[small.clone(), wide.clone()]).unwrap();
        assert_eq!(descriptors.len(), 2);
        assert_eq!(descriptors[0].offset, Some(1), "after the version byte");
        assert!(descriptors[1].offset.unwrap() > descriptors[0].offset.unwrap());
        assert_eq!(descriptors[0].cardinality, 3);
        assert_eq!(descriptors[1].cardinality as u64, wide.len());
        assert_eq!(descriptors[0].path_or_inline_dv, descriptors[1].path_or_inline_dv, "one file");
        assert_eq!(read(&home, &descriptors[0]).unwrap().unwrap(), small);
        assert_eq!(read(&home, &descriptors[1]).unwrap().unwrap(), wide);
        let files: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(files.len(), 1);
        assert_eq!(fs::metadata(dir.path().join(&files[0])).unwrap().len(), bytes);
        assert!(files[0].to_string_lossy().starts_with("deletion_vector_"), "{files:?}");

        // A damaged file is a reason, never a panic or a wrong set.
        let path = dir.path().join(&files[0]);
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 6;
        bytes[last] ^= 0xff;
        fs::write(&path, &bytes).unwrap();
        let damaged = read(&home, &descriptors[1]).unwrap();
        assert!(damaged.unwrap_err().contains("deletion vector"));
        fs::remove_file(&path).unwrap();
        assert!(read(&home, &descriptors[0]).unwrap().unwrap_err().contains("missing"));
        // A vector at an absolute path outside the table is not read.
        let elsewhere = DeletionVectorDescriptor {
            storage_type: StorageType::AbsolutePath,
            path_or_inline_dv: "file:///elsewhere/dv.bin".into(),
            ..descriptors[0].clone()
        };
        assert!(read(&home, &elsewhere).unwrap().unwrap_err().contains("outside the table"));
    }
}
