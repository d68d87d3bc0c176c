//! A corpus of tampered and hostile exports, each built here from a small generated export: every
//! case gives its documented exit code with and without `--strict` and with `--allow-mismatch`,
//! a message naming the file and the check, and never a published output that silently differs
//! from the manifests.
//!
//! The policy under test (README, "Integrity"): a mismatch between what was read and what the
//! manifests promise publishes and exits 1 (0 with `--allow-mismatch`, still reported); `--strict`
//! refuses it before publishing (exit 1). A data file listed twice or missing is refused before
//! reading (exit 1). Exports that cannot be read as exports (manifests that are not JSON, too
//! large, unknown formats, overflowing counts, keys or links that leave the export root) are
//! refused with exit 2.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use serde_json::{Value as Json, json};

use crate::common::*;

const ID: &str = "01790000000000-0a1b2c3d";

fn item(i: usize) -> String {
    format!(r#"{{"Item":{{"PK":{{"S":"USER#{i}"}},"SK":{{"S":"PROFILE"}},"Type":{{"S":"User"}},"n":{{"N":"{i}"}}}}}}"#)
}

fn lines(range: std::ops::Range<usize>) -> String {
    range.map(|i| item(i) + "\n").collect()
}

/// The base export under `dir`: 50 and 60 items in two files and one empty file (as AWS writes
/// for empty partitions), manifests with correct counts, MD5s and `.md5` side files.
fn base(dir: &Path) -> PathBuf {
    write_export(dir, &[gzip(lines(0..50).as_bytes()), gzip(lines(1000..1060).as_bytes()), gzip(b"")], &[50, 60, 0])
}

fn data(export: &Path, i: usize) -> PathBuf {
    export.join(format!("data/file{i:02}abcdefghijklmnopqrs.json.gz"))
}

fn key(i: usize) -> String {
    format!("AWSDynamoDB/{ID}/data/file{i:02}abcdefghijklmnopqrs.json.gz")
}

fn files_lines(export: &Path) -> Vec<Json> {
    std::fs::read_to_string(export.join("manifest-files.json"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Rewrites `manifest-files.json` from `lines`; `refresh` rewrites its `.md5` to match.
fn set_files_lines(export: &Path, lines: &[Json], refresh: bool) {
    let text: String = lines.iter().map(|l| l.to_string() + "\n").collect();
    set_files_text(export, &text, refresh);
}

fn set_files_text(export: &Path, text: &str, refresh: bool) {
    std::fs::write(export.join("manifest-files.json"), text).unwrap();
    if refresh {
        std::fs::write(export.join("manifest-files.md5"), md5_b64(text.as_bytes())).unwrap();
    }
}

fn edit_files(export: &Path, refresh: bool, f: impl FnOnce(&mut Vec<Json>)) {
    let mut l = files_lines(export);
    f(&mut l);
    set_files_lines(export, &l, refresh);
}

fn summary(export: &Path) -> Json {
    serde_json::from_str(&std::fs::read_to_string(export.join("manifest-summary.json")).unwrap()).unwrap()
}

/// Edits `manifest-summary.json` and rewrites its `.md5` to match.
fn edit_summary(export: &Path, f: impl FnOnce(&mut Json)) {
    let mut s = summary(export);
    f(&mut s);
    let text = s.to_string();
    std::fs::write(export.join("manifest-summary.json"), &text).unwrap();
    std::fs::write(export.join("manifest-summary.md5"), md5_b64(text.as_bytes())).unwrap();
}

/// Sets the summary's `itemCount` to the sum over `manifest-files.json`, as a careful tamperer would.
fn adjust_summary_count(export: &Path) {
    let total: u64 = files_lines(export).iter().map(|l| l["itemCount"].as_u64().unwrap()).sum();
    edit_summary(export, |s| s["itemCount"] = json!(total));
}

/// Replaces data file `i` with `bytes`; `fix_manifest` also records their MD5 and `count` (and
/// refreshes the manifest's `.md5`), so only what the bytes hold can tell.
fn replace_data(export: &Path, i: usize, bytes: &[u8], fix_manifest: Option<u64>) {
    std::fs::write(data(export, i), bytes).unwrap();
    if let Some(count) = fix_manifest {
        edit_files(export, true, |l| {
            l[i]["md5Checksum"] = json!(md5_b64(bytes));
            l[i]["itemCount"] = json!(count);
        });
        adjust_summary_count(export);
    }
}

fn md5_hex(bytes: &[u8]) -> String {
    use md5::Digest as _;
    md5::Md5::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// What a case must give.
#[derive(Clone, Copy)]
enum Want {
    /// Reads and publishes, reconciled: exit 0 in every mode.
    Clean,
    /// Does not reconcile: published with exit 1, refused by `--strict` (exit 1), published
    /// with exit 0 under `--allow-mismatch`. The default run's stderr names these.
    Mismatch(&'static [&'static str]),
    /// Refused before anything is published, in every mode, with this exit code and message.
    Refused(i32, &'static [&'static str]),
}

struct Case {
    name: &'static str,
    /// Builds the case under a fresh folder and returns the source to unwind.
    build: Box<dyn Fn(&Path) -> PathBuf>,
    want: Want,
}

fn case(name: &'static str, want: Want, build: impl Fn(&Path) -> PathBuf + 'static) -> Case {
    Case { name, build: Box::new(build), want }
}

/// A case that tampers with the base export in place and unwinds its `AWSDynamoDB/<id>` folder.
fn tamper(name: &'static str, want: Want, f: impl Fn(&Path, &Path) + 'static) -> Case {
    case(name, want, move |dir| {
        let export = base(dir);
        f(dir, &export);
        export
    })
}

fn cases() -> Vec<Case> {
    const MISSING: &[&str] = &["is missing", "manifest-files.json", "integrity check"];
    const ESCAPES: &[&str] = &["leaves the export root", "manifest-files.json"];
    const OUTSIDE: &[&str] = &["outside the export root"];
    vec![
        // --- Clean exports, and variations AWS or the documentation allow --------------------
        tamper("untouched", Want::Clean, |_, _| {}),
        tamper("hex_side_files", Want::Clean, |_, e| {
            for m in ["manifest-files", "manifest-summary"] {
                let bytes = std::fs::read(e.join(format!("{m}.json"))).unwrap();
                std::fs::write(e.join(format!("{m}.md5")), md5_hex(&bytes)).unwrap();
            }
        }),
        tamper("hex_checksum_side_file_as_named_by_the_docs", Want::Clean, |_, e| {
            // The exact case of the issue: `manifest-summary.checksum` holding the hex digest.
            let bytes = std::fs::read(e.join("manifest-summary.json")).unwrap();
            std::fs::remove_file(e.join("manifest-summary.md5")).unwrap();
            std::fs::write(e.join("manifest-summary.checksum"), md5_hex(&bytes).to_uppercase() + "\n").unwrap();
        }),
        tamper("base64_side_file_with_whitespace", Want::Clean, |_, e| {
            let bytes = std::fs::read(e.join("manifest-files.json")).unwrap();
            std::fs::write(e.join("manifest-files.md5"), format!("  {}\r\n", md5_b64(&bytes))).unwrap();
        }),
        tamper("no_side_files", Want::Clean, |_, e| {
            std::fs::remove_file(e.join("manifest-files.md5")).unwrap();
            std::fs::remove_file(e.join("manifest-summary.md5")).unwrap();
        }),
        tamper("two_identical_empty_files", Want::Clean, |_, e| {
            // AWS writes many empty files with the same bytes: not a duplicate.
            let empty = gzip(b"");
            std::fs::write(data(e, 3), &empty).unwrap();
            edit_files(e, true, |l| {
                l.push(json!({"itemCount": 0, "md5Checksum": md5_b64(&empty), "etag": "0-1", "dataFileS3Key": key(3)}));
            });
        }),
        tamper("data_file_link_inside_the_root", Want::Clean, |dir, e| {
            let moved = dir.join("AWSDynamoDB/data/shared.json.gz");
            std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
            std::fs::rename(data(e, 0), &moved).unwrap();
            symlink("../../data/shared.json.gz", data(e, 0)).unwrap();
        }),
        tamper("data_folder_link_inside_the_root", Want::Clean, |dir, e| {
            std::fs::rename(e.join("data"), dir.join("moved-data")).unwrap();
            symlink(dir.join("moved-data"), e.join("data")).unwrap();
        }),
        case("export_folder_named_through_a_link", Want::Clean, |dir| {
            // The user named a link: that path is the user's choice.
            let real = base(&dir.join("real"));
            let root = dir.join("linked/AWSDynamoDB");
            std::fs::create_dir_all(&root).unwrap();
            symlink(&real, root.join(ID)).unwrap();
            // The keys resolve under the named folder's real location.
            root.join(ID)
        }),
        case("summary_named_through_a_link", Want::Clean, |dir| {
            let e = base(dir);
            let elsewhere = dir.join("../summary-elsewhere.json");
            std::fs::rename(e.join("manifest-summary.json"), &elsewhere).unwrap();
            symlink(std::fs::canonicalize(&elsewhere).unwrap(), e.join("manifest-summary.json")).unwrap();
            e.join("manifest-summary.json")
        }),
        case("bare_data_file_linked_from_elsewhere", Want::Clean, |dir| {
            // Bare data files given directly are read where they are.
            let e = base(&dir.join("x"));
            let link = dir.join("bare.json.gz");
            symlink(data(&e, 0), &link).unwrap();
            link
        }),
        // --- Data files that do not hold what the manifest says --------------------------------
        tamper("data_file_truncated_in_half", Want::Mismatch(&["file01", "item count check", "MD5 check"]), |_, e| {
            let bytes = std::fs::read(data(e, 1)).unwrap();
            std::fs::write(data(e, 1), &bytes[..bytes.len() / 2]).unwrap();
        }),
        tamper(
            "lines_dropped_from_a_valid_gzip",
            Want::Mismatch(&["file00", "manifest says 50 items, read 40"]),
            |_, e| {
                replace_data(e, 0, &gzip(lines(0..40).as_bytes()), None);
            },
        ),
        tamper("lines_dropped_md5_updated", Want::Mismatch(&["file00", "item count check"]), |_, e| {
            // The MD5 now verifies: only the count tells.
            let bytes = gzip(lines(0..40).as_bytes());
            std::fs::write(data(e, 0), &bytes).unwrap();
            edit_files(e, true, |l| l[0]["md5Checksum"] = json!(md5_b64(&bytes)));
        }),
        tamper("extra_lines_md5_updated", Want::Mismatch(&["file00", "manifest says 50 items, read 55"]), |_, e| {
            let bytes = gzip(lines(0..55).as_bytes());
            std::fs::write(data(e, 0), &bytes).unwrap();
            edit_files(e, true, |l| l[0]["md5Checksum"] = json!(md5_b64(&bytes)));
        }),
        tamper("data_file_replaced_same_count", Want::Mismatch(&["file01", "MD5 check"]), |_, e| {
            replace_data(e, 1, &gzip(lines(5000..5060).as_bytes()), None);
        }),
        tamper(
            "data_file_replaced_by_garbage",
            Want::Mismatch(&["file00", "corrupt or truncated", "MD5 check"]),
            |_, e| {
                replace_data(e, 0, &[0x1f, 0x8b, 8, 0, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3], None);
            },
        ),
        tamper("data_file_emptied", Want::Mismatch(&["file01", "manifest says 60 items, read 0"]), |_, e| {
            replace_data(e, 1, &gzip(b""), None);
        }),
        tamper("data_file_zero_bytes", Want::Mismatch(&["file01", "manifest says 60 items"]), |_, e| {
            replace_data(e, 1, b"", None);
        }),
        tamper("empty_file_now_holds_items", Want::Mismatch(&["file02", "manifest says 0 items, read 5"]), |_, e| {
            replace_data(e, 2, &gzip(lines(7000..7005).as_bytes()), None);
        }),
        tamper("md5_checksum_in_hex", Want::Mismatch(&["file00", "MD5 check"]), |_, e| {
            let bytes = std::fs::read(data(e, 0)).unwrap();
            edit_files(e, true, |l| l[0]["md5Checksum"] = json!(md5_hex(&bytes)));
        }),
        tamper("md5_checksum_huge", Want::Mismatch(&["file00", "MD5 check", "…"]), |_, e| {
            edit_files(e, true, |l| l[0]["md5Checksum"] = json!("A".repeat(100_000)));
        }),
        // --- Manifests that do not list what they should ---------------------------------------
        tamper("entry_removed", Want::Mismatch(&["`manifest-summary.json` says 110 items", "lists 50"]), |_, e| {
            edit_files(e, false, |l| {
                l.remove(1);
            });
        }),
        tamper("entry_removed_side_file_refreshed", Want::Mismatch(&["summary item count check"]), |_, e| {
            edit_files(e, true, |l| {
                l.remove(1);
            });
        }),
        tamper(
            "entry_removed_summary_adjusted",
            Want::Mismatch(&["manifest-files.md5", "checksum side file check"]),
            |_, e| {
                edit_files(e, false, |l| {
                    l.remove(1);
                });
                adjust_summary_count(e);
            },
        ),
        tamper("empty_manifest_files", Want::Mismatch(&["says 110 items", "lists 0", "manifest-files.md5"]), |_, e| {
            set_files_text(e, "", false);
        }),
        tamper("empty_manifest_files_side_file_refreshed", Want::Mismatch(&["says 110 items", "lists 0"]), |_, e| {
            set_files_text(e, "", true);
        }),
        tamper("item_count_raised", Want::Mismatch(&["file00", "manifest says 51 items, read 50"]), |_, e| {
            edit_files(e, true, |l| l[0]["itemCount"] = json!(51));
            adjust_summary_count(e);
        }),
        tamper("summary_count_higher", Want::Mismatch(&["says 111 items", "lists 110"]), |_, e| {
            edit_summary(e, |s| s["itemCount"] = json!(111));
        }),
        tamper("summary_count_lower", Want::Mismatch(&["says 100 items", "lists 110"]), |_, e| {
            edit_summary(e, |s| s["itemCount"] = json!(100));
        }),
        tamper("summary_count_max", Want::Mismatch(&["says 18446744073709551615 items"]), |_, e| {
            edit_summary(e, |s| s["itemCount"] = json!(u64::MAX));
        }),
        tamper(
            "summary_edited_side_file_stale",
            Want::Mismatch(&["manifest-summary.md5", "checksum side file check"]),
            |_, e| {
                let s = std::fs::read_to_string(e.join("manifest-summary.json"))
                    .unwrap()
                    .replace("\"b\"", "\"other-bucket\"");
                std::fs::write(e.join("manifest-summary.json"), s).unwrap();
            },
        ),
        // --- Checksum side files ----------------------------------------------------------------
        tamper(
            "side_file_wrong_hex",
            Want::Mismatch(&["manifest-files.md5", "0123456789abcdef0123456789abcdef"]),
            |_, e| {
                std::fs::write(e.join("manifest-files.md5"), "0123456789abcdef0123456789abcdef").unwrap();
            },
        ),
        tamper(
            "side_file_wrong_base64",
            Want::Mismatch(&["manifest-summary.md5", "AAAAAAAAAAAAAAAAAAAAAA=="]),
            |_, e| {
                std::fs::write(e.join("manifest-summary.md5"), "AAAAAAAAAAAAAAAAAAAAAA==").unwrap();
            },
        ),
        tamper("side_file_empty", Want::Mismatch(&["manifest-files.md5", "checksum side file check"]), |_, e| {
            std::fs::write(e.join("manifest-files.md5"), "").unwrap();
        }),
        tamper("side_file_digest_twice", Want::Mismatch(&["manifest-files.md5"]), |_, e| {
            let d = md5_b64(&std::fs::read(e.join("manifest-files.json")).unwrap());
            std::fs::write(e.join("manifest-files.md5"), format!("{d}\n{d}\n")).unwrap();
        }),
        tamper("side_file_huge", Want::Mismatch(&["manifest-files.md5", "…"]), |_, e| {
            // 200 MiB, sparse: must be neither read whole nor echoed.
            let f = std::fs::File::create(e.join("manifest-files.md5")).unwrap();
            f.set_len(200 << 20).unwrap();
        }),
        tamper("side_file_terminal_escapes", Want::Mismatch(&["manifest-files.md5", "\\u{1b}[2J"]), |_, e| {
            std::fs::write(e.join("manifest-files.md5"), "\u{1b}[2J\u{1b}[31mpwned").unwrap();
        }),
        tamper(
            "side_file_linked_to_dev_zero",
            Want::Refused(2, &["manifest-files.md5", "/dev/zero", "outside the export root"]),
            |_, e| {
                std::fs::remove_file(e.join("manifest-files.md5")).unwrap();
                symlink("/dev/zero", e.join("manifest-files.md5")).unwrap();
            },
        ),
        tamper("side_file_is_a_folder", Want::Refused(2, &["manifest-summary.md5", "not a regular file"]), |_, e| {
            std::fs::remove_file(e.join("manifest-summary.md5")).unwrap();
            std::fs::create_dir(e.join("manifest-summary.md5")).unwrap();
        }),
        // --- Data files listed twice or missing: refused before reading -------------------------
        tamper(
            "line_repeated_summary_adjusted",
            Want::Refused(1, &["lists data file", "twice, on lines 2 and 4", "file01", "manifest-files.json"]),
            |_, e| {
                // The issue's case: with the summary adjusted, `--strict` used to pass and every
                // item of the file appeared twice.
                edit_files(e, true, |l| {
                    let again = l[1].clone();
                    l.push(again);
                });
                adjust_summary_count(e);
            },
        ),
        tamper("same_key_spelled_with_a_prefix", Want::Refused(1, &["twice, on lines 1 and 4", "file00"]), |_, e| {
            edit_files(e, true, |l| {
                let mut again = l[0].clone();
                again["dataFileS3Key"] = json!(format!("junk/{}", key(0)));
                l.push(again);
            });
            adjust_summary_count(e);
        }),
        tamper(
            "same_bytes_under_two_keys",
            Want::Refused(1, &["the same bytes twice", "line 1", "line 4", "file00", "file03"]),
            |_, e| {
                std::fs::copy(data(e, 0), data(e, 3)).unwrap();
                edit_files(e, true, |l| {
                    let mut again = l[0].clone();
                    again["dataFileS3Key"] = json!(key(3));
                    l.push(again);
                });
                adjust_summary_count(e);
            },
        ),
        tamper("same_bytes_claiming_no_items", Want::Refused(1, &["the same bytes twice", "file03"]), |_, e| {
            std::fs::copy(data(e, 0), data(e, 3)).unwrap();
            edit_files(e, true, |l| {
                let mut again = l[0].clone();
                again["dataFileS3Key"] = json!(key(3));
                again["itemCount"] = json!(0);
                l.push(again);
            });
        }),
        tamper("data_file_missing", Want::Refused(1, MISSING), |_, e| {
            std::fs::remove_file(data(e, 1)).unwrap();
        }),
        tamper("data_folder_missing", Want::Refused(1, MISSING), |_, e| {
            std::fs::remove_dir_all(e.join("data")).unwrap();
        }),
        tamper("dangling_data_file_link", Want::Refused(1, MISSING), |_, e| {
            std::fs::remove_file(data(e, 0)).unwrap();
            symlink("nowhere.json.gz", data(e, 0)).unwrap();
        }),
        tamper("key_url_encoded_dotdot", Want::Refused(1, MISSING), |_, e| {
            // Keys are file names, never decoded: `%2e%2e` is a folder name that is not there.
            edit_files(e, true, |l| l[0]["dataFileS3Key"] = json!("AWSDynamoDB/%2e%2e/%2e%2e/etc/passwd"));
        }),
        // --- Exports that cannot be read as exports --------------------------------------------
        tamper("item_counts_overflow", Want::Refused(2, &["manifest-files.json", "line 2", "overflows"]), |_, e| {
            edit_files(e, true, |l| {
                l[0]["itemCount"] = json!(u64::MAX);
                l[1]["itemCount"] = json!(1);
            });
        }),
        tamper(
            "item_count_negative",
            Want::Refused(2, &["manifest-files.json", "line 1", "not a valid manifest entry"]),
            |_, e| {
                edit_files(e, true, |l| l[0]["itemCount"] = json!(-1));
            },
        ),
        tamper("item_count_beyond_u64", Want::Refused(2, &["manifest-files.json", "line 2"]), |_, e| {
            let text = std::fs::read_to_string(e.join("manifest-files.json"))
                .unwrap()
                .replace("\"itemCount\":60", "\"itemCount\":18446744073709551616");
            set_files_text(e, &text, true);
        }),
        tamper("manifest_files_not_json", Want::Refused(2, &["manifest-files.json", "line 1"]), |_, e| {
            set_files_text(e, "this is not json\n", true);
        }),
        tamper("manifest_files_missing", Want::Refused(2, &["manifest-files.json", "does not exist"]), |_, e| {
            std::fs::remove_file(e.join("manifest-files.json")).unwrap();
        }),
        tamper("summary_not_json", Want::Refused(2, &["manifest-summary.json", "not valid JSON"]), |_, e| {
            std::fs::write(e.join("manifest-summary.json"), "{\"itemCount\":").unwrap();
        }),
        tamper("summary_huge", Want::Refused(2, &["manifest-summary.json", "more than a manifest can be"]), |_, e| {
            let f = std::fs::File::create(e.join("manifest-summary.json")).unwrap();
            f.set_len(2 << 20).unwrap();
        }),
        tamper("export_type_unknown", Want::Refused(2, &["exportType", "BACKUP_EXPORT"]), |_, e| {
            edit_summary(e, |s| s["exportType"] = json!("BACKUP_EXPORT"));
        }),
        tamper(
            "export_type_incremental",
            Want::Refused(2, &["manifest-summary.json", "has no `exportFromTime`"]),
            |_, e| {
                edit_summary(e, |s| s["exportType"] = json!("INCREMENTAL_EXPORT"));
            },
        ),
        // Ion is read, but a summary flipped to `ION` no longer matches its `.json.gz` data files.
        tamper("output_format_ion", Want::Refused(2, &["`outputFormat` is `ION`", ".ion.gz"]), |_, e| {
            edit_summary(e, |s| s["outputFormat"] = json!("ION"));
        }),
        tamper("output_format_unknown", Want::Refused(2, &["outputFormat", "CSV", "DYNAMODB_JSON"]), |_, e| {
            edit_summary(e, |s| s["outputFormat"] = json!("CSV"));
        }),
        tamper("output_format_not_a_string", Want::Refused(2, &["manifest-summary.json", "not valid JSON"]), |_, e| {
            edit_summary(e, |s| s["outputFormat"] = json!(7));
        }),
        // --- Keys that leave the export root ----------------------------------------------------
        tamper("key_dotdot", Want::Refused(2, ESCAPES), |_, e| {
            edit_files(e, true, |l| l[0]["dataFileS3Key"] = json!("AWSDynamoDB/../../../../etc/passwd"));
        }),
        tamper("key_absolute", Want::Refused(2, ESCAPES), |_, e| {
            edit_files(e, true, |l| l[0]["dataFileS3Key"] = json!("/etc/passwd"));
        }),
        tamper("key_double_slash", Want::Refused(2, ESCAPES), |_, e| {
            edit_files(e, true, |l| l[0]["dataFileS3Key"] = json!(format!("AWSDynamoDB/{ID}//data/x.json.gz")));
        }),
        tamper("key_dot_segment", Want::Refused(2, ESCAPES), |_, e| {
            edit_files(e, true, |l| l[0]["dataFileS3Key"] = json!(format!("AWSDynamoDB/{ID}/./data/x.json.gz")));
        }),
        tamper("key_backslashes", Want::Refused(2, ESCAPES), |_, e| {
            edit_files(e, true, |l| l[0]["dataFileS3Key"] = json!("AWSDynamoDB/x/..\\..\\..\\etc\\passwd"));
        }),
        tamper("key_nul_byte", Want::Refused(2, ESCAPES), |_, e| {
            edit_files(e, true, |l| l[0]["dataFileS3Key"] = json!(format!("AWSDynamoDB/{ID}/data/x\u{0}.json.gz")));
        }),
        tamper("key_outside_any_export", Want::Refused(2, ESCAPES), |_, e| {
            edit_files(e, true, |l| l[0]["dataFileS3Key"] = json!("elsewhere/data.json.gz"));
        }),
        tamper("key_huge", Want::Refused(2, &["leaves the export root", "…"]), |_, e| {
            edit_files(e, true, |l| l[0]["dataFileS3Key"] = json!(format!("../{}", "x".repeat(100_000))));
        }),
        tamper(
            "manifest_files_key_escapes",
            Want::Refused(2, &["leaves the export root", "manifest-summary.json"]),
            |_, e| {
                edit_summary(e, |s| s["manifestFilesS3Key"] = json!("AWSDynamoDB/../../etc/passwd"));
            },
        ),
        // --- Links that leave the export root ---------------------------------------------------
        tamper("data_file_link_outside", Want::Refused(2, OUTSIDE), |dir, e| {
            let outside = dir.join("../outside.json.gz");
            std::fs::copy(data(e, 0), &outside).unwrap();
            std::fs::remove_file(data(e, 0)).unwrap();
            symlink(std::fs::canonicalize(&outside).unwrap(), data(e, 0)).unwrap();
        }),
        tamper(
            "data_file_linked_to_etc_passwd",
            Want::Refused(2, &["/etc/passwd", "outside the export root", "file00"]),
            |_, e| {
                std::fs::remove_file(data(e, 0)).unwrap();
                symlink("/etc/passwd", data(e, 0)).unwrap();
            },
        ),
        tamper("data_folder_link_outside", Want::Refused(2, OUTSIDE), |dir, e| {
            let outside = dir.join("../outside-data");
            std::fs::rename(e.join("data"), &outside).unwrap();
            symlink(std::fs::canonicalize(&outside).unwrap(), e.join("data")).unwrap();
        }),
        tamper(
            "manifest_files_link_outside",
            Want::Refused(2, &["manifest-files.json", "outside the export root"]),
            |dir, e| {
                let outside = dir.join("../outside-manifest.json");
                std::fs::rename(e.join("manifest-files.json"), &outside).unwrap();
                symlink(std::fs::canonicalize(&outside).unwrap(), e.join("manifest-files.json")).unwrap();
            },
        ),
        case("aws_folder_link_outside", Want::Refused(2, OUTSIDE), |dir| {
            // The root form: `AWSDynamoDB/` itself leads elsewhere.
            base(&dir.join("elsewhere"));
            let root = dir.join("root");
            std::fs::create_dir_all(&root).unwrap();
            symlink(dir.join("elsewhere/AWSDynamoDB"), root.join("AWSDynamoDB")).unwrap();
            root
        }),
        tamper(
            "summary_link_outside_in_a_named_export_folder",
            Want::Refused(2, &["manifest-summary.json", "outside the export root"]),
            |dir, e| {
                // The export folder is named, the summary in it is found: a link out is refused.
                let outside = dir.join("../summary-outside.json");
                std::fs::rename(e.join("manifest-summary.json"), &outside).unwrap();
                symlink(std::fs::canonicalize(&outside).unwrap(), e.join("manifest-summary.json")).unwrap();
            },
        ),
    ]
}

/// Rows of every table of a published output, read from its Parquet files.
fn rows_published(out: &Path) -> u64 {
    let mut n = 0;
    for entry in std::fs::read_dir(out).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() && p.file_name().is_some_and(|f| f != "_etl") {
            n += count_rows(&p) as u64;
        }
    }
    n
}

/// What the export's manifests (as tampered) promise: the sum over `manifest-files.json` of
/// the lines that parse, and the summary's `itemCount`.
fn promised(source: &Path) -> Option<(u64, u64)> {
    let export = if source.join("manifest-summary.json").is_file() {
        source.to_owned()
    } else if source.ends_with("manifest-summary.json") {
        source.parent()?.to_owned()
    } else {
        return None;
    };
    let s: Json = serde_json::from_str(&std::fs::read_to_string(export.join("manifest-summary.json")).ok()?).ok()?;
    let listed = std::fs::read_to_string(export.join("manifest-files.json"))
        .ok()?
        .lines()
        .filter_map(|l| serde_json::from_str::<Json>(l).ok()?["itemCount"].as_u64())
        .sum();
    Some((listed, s["itemCount"].as_u64()?))
}

/// Runs one mode of one case and returns what went wrong, if anything.
fn check(case: &Case, mode: &str, tmp: &Path) -> Vec<String> {
    let dir = tmp.join(case.name).join(mode).join("export");
    std::fs::create_dir_all(&dir).unwrap();
    let source = (case.build)(&dir);
    let out = tmp.join(case.name).join(mode).join("out");
    let mut args: Vec<std::ffi::OsString> = vec![
        "unwind".into(),
        source.clone().into(),
        "--out".into(),
        out.clone().into(),
        "--threads".into(),
        "2".into(),
    ];
    match mode {
        "strict" => args.push("--strict".into()),
        "allow" => args.push("--allow-mismatch".into()),
        _ => {}
    }
    let run = etl(&args);
    let mut problems = Vec::new();
    let mut fail = |why: String| problems.push(format!("{} [{mode}]: {why}\n--- stderr:\n{}", case.name, run.stderr));
    let published = out.join("_etl/run.json").is_file();
    let last = run.stderr.trim_end().lines().last().unwrap_or_default().to_owned();
    let (code, publishes, says): (i32, bool, &[&str]) = match (case.want, mode) {
        (Want::Clean, _) => (0, true, &[]),
        (Want::Mismatch(says), "default") => (1, true, says),
        (Want::Mismatch(_), "strict") => (1, false, &["strict mode"]),
        (Want::Mismatch(says), _) => (0, true, says),
        (Want::Refused(code, says), _) => (code, false, says),
    };
    if run.code != code {
        fail(format!("exit {} instead of {code}", run.code));
    }
    if published != publishes {
        fail(format!("published: {published}, expected {publishes}"));
    }
    for s in says {
        if !run.stderr.contains(s) {
            fail(format!("stderr does not say {s:?}"));
        }
    }
    if run.stderr.contains("internal error") || run.stderr.contains("bug in etl") || run.stderr.contains("panicked") {
        fail("reported as a bug".into());
    }
    // Hostile inputs are never echoed whole, and never read from outside the export.
    if run.stderr.len() > 16 * 1024 {
        fail(format!("{} bytes of stderr", run.stderr.len()));
    }
    if run.stderr.contains("root:x:0") {
        fail("echoed /etc/passwd".into());
    }
    if run.stderr.contains('\u{1b}') {
        fail("wrote a terminal escape sequence".into());
    }
    if let Want::Mismatch(_) = case.want
        && mode != "strict"
    {
        let want = if mode == "allow" { "warning: NOT RECONCILED" } else { "error: NOT RECONCILED" };
        if !last.starts_with(want) {
            fail(format!("last line is {last:?}, not {want:?}"));
        }
    }
    if published {
        let report = run_report(&out);
        let size = std::fs::metadata(out.join("_etl/run.json")).unwrap().len();
        if size > 256 * 1024 {
            fail(format!("run.json is {size} bytes"));
        }
        let verdict = report["reconciliation"]["integrity"]["verdict"].as_str().unwrap_or_default().to_owned();
        let rows = rows_published(&out);
        let items_read = report["reconciliation"]["items_read"].as_u64().unwrap();
        if rows != items_read {
            fail(format!("{rows} rows published, run.json says {items_read} items read"));
        }
        // Never silent: an output whose rows differ from what the manifests promise exits 1,
        // or 0 only when `--allow-mismatch` accepted it and the summary said so.
        let matches = promised(&source).is_none_or(|(listed, summary)| listed == rows && summary == rows);
        match (matches, verdict.as_str()) {
            (true, "reconciled" | "unverified") => {}
            (_, "not_reconciled") if run.code == 1 && last.contains("NOT RECONCILED") => {}
            (_, "accepted") if mode == "allow" && run.code == 0 && last.contains("NOT RECONCILED") => {}
            (m, v) => fail(format!("rows match the manifests: {m}, verdict {v}, exit {}", run.code)),
        }
        if report["options"]["allow_mismatch"] != (mode == "allow") {
            fail("run.json does not record --allow-mismatch".into());
        }
    }
    problems
}

#[test]
fn tampered_and_hostile_exports_give_their_documented_outcome() {
    let cases = cases();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let mut names: Vec<&str> = cases.iter().map(|c| c.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "case names are unique");
    let tmp = tempfile::tempdir().unwrap();
    let mut problems = Vec::new();
    for case in &cases {
        for mode in ["default", "strict", "allow"] {
            problems.extend(check(case, mode, tmp.path()));
        }
    }
    assert!(problems.is_empty(), "{} problems:\n\n{}", problems.len(), problems.join("\n\n"));
}

/// The last line of a run's stderr.
fn last_line(stderr: &str) -> &str {
    stderr.trim_end().lines().last().unwrap_or_default()
}

/// The issue's cases, at their scale: 20,000 items in four files. Each is published and exits 1
/// with the verdict as the summary's last line, is accepted with `--allow-mismatch` (exit 0,
/// still reported), and refused by `--strict` with the previous output left as it was.
#[test]
fn items_missing_against_the_manifests_exit_1() {
    let tmp = tempfile::tempdir().unwrap();
    let file = |f: usize| gzip(lines(f * 5000..(f + 1) * 5000).as_bytes());
    type Tamper = fn(&Path);
    let cases: [(&str, Tamper, &str); 4] = [
        (
            "truncated",
            |e| {
                let bytes = std::fs::read(data(e, 1)).unwrap();
                std::fs::write(data(e, 1), &bytes[..bytes.len() / 2]).unwrap();
            },
            "the item count of 1 data file, the MD5 of 1 data file",
        ),
        (
            "dropped",
            |e| {
                std::fs::write(data(e, 2), gzip(lines(10_000..12_500).as_bytes())).unwrap();
            },
            "the item count of 1 data file, the MD5 of 1 data file",
        ),
        (
            "entry_removed",
            |e| {
                edit_files(e, false, |l| {
                    l.remove(3);
                });
            },
            "`manifest-files.md5`, the summary's itemCount (20,000, `manifest-files.json` lists 15,000)",
        ),
        (
            "empty_manifest",
            |e| set_files_text(e, "", false),
            "`manifest-files.md5`, the summary's itemCount (20,000, `manifest-files.json` lists 0)",
        ),
    ];
    for (name, tamper, what) in cases {
        let export = write_export(&tmp.path().join(name), &(0..4).map(file).collect::<Vec<_>>(), &[5000; 4]);
        // A committed, reconciled output first.
        let out = tmp.path().join(format!("{name}-out"));
        let good = unwind(&[&export], &out, &[], 0);
        assert!(!good.stderr.contains("NOT RECONCILED"), "{}", good.stderr);
        let committed = std::fs::read(out.join("_etl/run.json")).unwrap();
        tamper(&export);

        // --strict: refused before publishing; the committed output is untouched.
        let run = unwind(&[&export], &out, &["--strict"], 1);
        assert!(run.stderr.contains("strict mode"), "{name}: {}", run.stderr);
        assert_eq!(std::fs::read(out.join("_etl/run.json")).unwrap(), committed, "{name}");

        // Default: published, exit 1, the verdict last.
        let run = unwind(&[&export], &out, &[], 1);
        let report = run_report(&out);
        let integrity = &report["reconciliation"]["integrity"];
        assert_eq!(integrity["verdict"], "not_reconciled", "{name}");
        assert_eq!(integrity["expected_items"], 20_000, "{name}");
        let read = integrity["items_read"].as_u64().unwrap();
        assert!(read < 20_000, "{name}: {read}");
        assert_eq!(read, rows_published(&out), "{name}");
        let group = |n: u64| {
            let s = n.to_string();
            let mut out = String::new();
            for (i, c) in s.chars().enumerate() {
                if i > 0 && (s.len() - i).is_multiple_of(3) {
                    out.push(',');
                }
                out.push(c);
            }
            out
        };
        assert_eq!(
            last_line(&run.stderr),
            format!(
                "error: NOT RECONCILED: {} of 20,000 items read from export `{}`; does not verify: {what}; exit 1 (pass --allow-mismatch to accept)",
                group(read),
                export.display()
            ),
            "{name}"
        );

        // --allow-mismatch: exit 0, still reported, in the summary and in run.json.
        let run = unwind(&[&export], &out, &["--allow-mismatch"], 0);
        assert!(last_line(&run.stderr).starts_with("warning: NOT RECONCILED: "), "{name}: {}", run.stderr);
        assert!(last_line(&run.stderr).ends_with("; accepted by --allow-mismatch"), "{name}: {}", run.stderr);
        let report = run_report(&out);
        assert_eq!(report["reconciliation"]["integrity"]["verdict"], "accepted", "{name}");
        assert_eq!(report["options"]["allow_mismatch"], true, "{name}");
        // --strict and --allow-mismatch contradict each other.
        let run = unwind(&[&export], &out, &["--strict", "--allow-mismatch"], 2);
        assert!(run.stderr.contains("--allow-mismatch") && run.stderr.contains("--strict"), "{}", run.stderr);
    }
}

/// With several files read by four threads, a `--strict` integrity failure found in one reader
/// (an MD5 that does not verify, a truncated or replaced file, a count that differs from
/// `itemCount`) exits 1 naming the file, never as a bug, and publishes nothing.
#[test]
fn strict_integrity_failures_in_reader_threads_name_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let file = |f: usize| gzip(lines(f * 10_000..f * 10_000 + 3000).as_bytes());
    type Tamper = fn(&Path);
    let cases: [(&str, usize, Tamper, &str); 4] = [
        ("md5", 3, |e| edit_files(e, true, |l| l[3]["md5Checksum"] = json!("AAAAAAAAAAAAAAAAAAAAAA==")), "MD5 check"),
        (
            "truncated",
            2,
            |e| {
                let bytes = std::fs::read(data(e, 2)).unwrap();
                std::fs::write(data(e, 2), &bytes[..bytes.len() * 2 / 3]).unwrap();
            },
            "corrupt_file",
        ),
        ("replaced", 4, |e| std::fs::write(data(e, 4), gzip(lines(90_000..93_000).as_bytes())).unwrap(), "MD5 check"),
        (
            "count",
            5,
            |e| {
                let bytes = gzip(lines(50_000..52_999).as_bytes());
                std::fs::write(data(e, 5), &bytes).unwrap();
                edit_files(e, true, |l| l[5]["md5Checksum"] = json!(md5_b64(&bytes)));
            },
            "manifest says 3000 items, read 2999 (item count check)",
        ),
    ];
    for (name, victim, tamper, check) in cases {
        let export = write_export(&tmp.path().join(name), &(0..8).map(file).collect::<Vec<_>>(), &[3000; 8]);
        tamper(&export);
        let out = tmp.path().join(format!("{name}-out"));
        let run = unwind(&[&export], &out, &["--strict", "--threads", "4"], 1);
        assert!(run.stderr.contains("strict mode"), "{name}: {}", run.stderr);
        assert!(run.stderr.contains(&format!("file{victim:02}")), "{name}: {}", run.stderr);
        assert!(run.stderr.contains(check), "{name}: {}", run.stderr);
        assert!(!run.stderr.contains("internal error") && !run.stderr.contains("bug in etl"), "{name}: {}", run.stderr);
        assert!(!out.exists(), "{name}");
        // Without --strict: published, exit 1, the file named in the warnings.
        let run = unwind(&[&export], &out, &["--threads", "4"], 1);
        assert!(run.stderr.contains(&format!("file{victim:02}")), "{name}: {}", run.stderr);
        assert!(last_line(&run.stderr).starts_with("error: NOT RECONCILED"), "{name}: {}", run.stderr);
    }
}
