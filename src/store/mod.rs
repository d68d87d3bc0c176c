//! The one data plane: where bytes live, parsed once.
//!
//! Every place a user names (a source, an `--out` target, `etl sql --data`) becomes a
//! [`Location`] at the command line's edge, and no other code looks at the text again. Object
//! storage (`s3://`, and `memory://` for tests and embedding) goes through `object_store`, the
//! client DataFusion already uses, with one I/O runtime for the whole process ([`io_runtime`]) and
//! typed errors that carry a hint ([`StoreError`]). Local paths may be read with `std::fs` for
//! speed, but the decision *where* is made here once.
//!
//! This module knows nothing of DynamoDB items or tables.

pub mod error;
pub mod memory;
pub mod s3;

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use object_store::ObjectStore;

pub use error::{ObjectErrorKind, StoreError};

use crate::aws::AwsOptions;

/// An object store scheme etl reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Amazon S3 or an S3-compatible service (`--endpoint-url`).
    S3,
    /// A process-wide in-memory store, named by its "bucket" ([`memory`]).
    Memory,
}

impl Scheme {
    pub fn prefix(self) -> &'static str {
        match self {
            Scheme::S3 => "s3://",
            Scheme::Memory => "memory://",
        }
    }
}

/// `s3://bucket/key` or `memory://bucket/key`, split.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectUrl {
    pub scheme: Scheme,
    pub bucket: String,
    /// The key or key prefix, without a leading `/`; may be empty.
    pub key: String,
}

impl ObjectUrl {
    /// Parses `s3://bucket[/key]` or `memory://bucket[/key]`; `None` when `s` has neither scheme.
    pub fn parse(s: &str) -> Option<Result<ObjectUrl, LocationError>> {
        let (scheme, rest) = if let Some(r) = s.strip_prefix("s3://") {
            (Scheme::S3, r)
        } else if let Some(r) = s.strip_prefix("memory://") {
            (Scheme::Memory, r)
        } else {
            return None;
        };
        let bad = |message: &str| LocationError::BadUrl { url: s.to_owned(), message: message.to_owned() };
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Some(Err(bad("it names no bucket")));
        }
        if key.split('/').any(|seg| seg == "." || seg == "..") {
            return Some(Err(bad("it has a `.` or `..` segment")));
        }
        Some(Ok(ObjectUrl { scheme, bucket: bucket.to_owned(), key: key.trim_start_matches('/').to_owned() }))
    }

    /// The key prefix as a folder: empty, or ending in `/`.
    pub fn dir_prefix(&self) -> String {
        let k = self.key.trim_end_matches('/');
        if k.is_empty() { String::new() } else { format!("{k}/") }
    }

    /// The URL of another key in the same bucket.
    pub fn url_of(&self, key: &str) -> String {
        format!("{}{}/{}", self.scheme.prefix(), self.bucket, key)
    }

    /// The URL of the bucket, as DataFusion registers object stores (`s3://bucket`).
    pub fn bucket_url(&self) -> String {
        format!("{}{}", self.scheme.prefix(), self.bucket)
    }
}

impl fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}/{}", self.scheme.prefix(), self.bucket, self.key)
    }
}

/// Where something is, as the user named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A local file or folder.
    Path(PathBuf),
    /// An object or prefix in an object store.
    Object(ObjectUrl),
    /// `-`: standard input.
    Stdin,
    /// `dynamodb://TABLE`: a live table.
    DynamoDb { table: String },
}

/// A place a user named that etl cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocationError {
    #[error("`{url}` is not a valid URL: {message}")]
    BadUrl { url: String, message: String },
    #[error("`{url}`: etl reads and writes local paths, `s3://` and `memory://` URLs, not `{scheme}://`")]
    UnknownScheme { url: String, scheme: String },
    #[error("`{given}` cannot be {role}")]
    WrongRole { given: String, role: &'static str },
    #[error("the location is empty")]
    Empty,
}

impl LocationError {
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            LocationError::BadUrl { .. } => Some("write object locations as `s3://bucket/prefix`"),
            LocationError::UnknownScheme { .. } => {
                Some("give a local path, `s3://bucket/prefix`, or `dynamodb://TABLE` for a live table")
            }
            LocationError::WrongRole { .. } => Some("outputs are a local folder or `s3://bucket/prefix`"),
            LocationError::Empty => None,
        }
    }
}

impl Location {
    /// Parses what a user typed: a path, `s3://…`, `memory://…`, `-` or `dynamodb://TABLE`.
    pub fn parse(s: &str) -> Result<Location, LocationError> {
        if s.is_empty() {
            return Err(LocationError::Empty);
        }
        if s == "-" {
            return Ok(Location::Stdin);
        }
        if let Some(table) = s.strip_prefix("dynamodb://") {
            let table = table.trim_end_matches('/');
            if table.is_empty() || table.contains('/') {
                return Err(LocationError::BadUrl {
                    url: s.to_owned(),
                    message: "write a live table as `dynamodb://TABLE`".into(),
                });
            }
            return Ok(Location::DynamoDb { table: table.to_owned() });
        }
        if let Some(url) = ObjectUrl::parse(s) {
            return url.map(Location::Object);
        }
        if let Some((scheme, _)) = s.split_once("://")
            && !scheme.is_empty()
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        {
            return Err(LocationError::UnknownScheme { url: s.to_owned(), scheme: scheme.to_owned() });
        }
        Ok(Location::Path(PathBuf::from(s)))
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Path(p) => write!(f, "{}", p.display()),
            Location::Object(u) => write!(f, "{u}"),
            Location::Stdin => f.write_str("-"),
            Location::DynamoDb { table } => write!(f, "dynamodb://{table}"),
        }
    }
}

/// Where output is written, or a committed output is read from: a folder or an object prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Path(PathBuf),
    Object(ObjectUrl),
}

impl Target {
    /// Parses an output location; `-` and `dynamodb://` are refused.
    pub fn parse(s: &str) -> Result<Target, LocationError> {
        match Location::parse(s)? {
            Location::Path(p) => Ok(Target::Path(p)),
            Location::Object(u) => Ok(Target::Object(u)),
            Location::Stdin | Location::DynamoDb { .. } => {
                Err(LocationError::WrongRole { given: s.to_owned(), role: "an output or a committed output to read" })
            }
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Path(p) => write!(f, "{}", p.display()),
            Target::Object(u) => write!(f, "{u}"),
        }
    }
}

/// The runtime for object I/O, shared by every object reader and writer of the process.
///
/// Object reads are driven here and handed to the CPU-bound decoder threads through bounded
/// channels, so blocking code may call [`tokio::runtime::Runtime::block_on`] on it from any
/// thread that is not itself inside a runtime.
pub fn io_runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        #[allow(clippy::expect_used)] // only fails when the OS refuses threads: nothing to recover
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("etl-io")
            .enable_all()
            .build()
            .expect("the I/O runtime starts")
    })
}

/// The bytes of the object `key`, or `None` when there is no such object.
pub async fn get_if_exists(
    store: &dyn ObjectStore,
    key: &object_store::path::Path,
) -> Result<Option<bytes::Bytes>, object_store::Error> {
    use object_store::ObjectStoreExt as _;
    match store.get(key).await {
        Ok(r) => r.bytes().await.map(Some),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The object store holding `url`'s bucket.
pub async fn open(url: &ObjectUrl, aws: &AwsOptions) -> Result<Arc<dyn ObjectStore>, StoreError> {
    match url.scheme {
        Scheme::S3 => Ok(s3::store(&url.bucket, aws).await?),
        Scheme::Memory => Ok(memory::store(&url.bucket)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse_once() {
        assert_eq!(Location::parse("-").unwrap(), Location::Stdin);
        assert_eq!(Location::parse("out/x").unwrap(), Location::Path("out/x".into()));
        assert_eq!(Location::parse("dynamodb://Shop").unwrap(), Location::DynamoDb { table: "Shop".into() });
        let Location::Object(u) = Location::parse("s3://b/exports/shop/").unwrap() else { panic!() };
        assert_eq!((u.scheme, u.bucket.as_str(), u.key.as_str()), (Scheme::S3, "b", "exports/shop/"));
        assert_eq!(u.dir_prefix(), "exports/shop/");
        assert_eq!(u.url_of("k"), "s3://b/k");
        let Location::Object(m) = Location::parse("memory://t").unwrap() else { panic!() };
        assert_eq!((m.scheme, m.dir_prefix()), (Scheme::Memory, String::new()));
        for bad in ["s3:///x", "s3://b/a/../c", "dynamodb://", "dynamodb://a/b", ""] {
            assert!(Location::parse(bad).is_err(), "{bad}");
        }
        assert!(matches!(Location::parse("gs://b/x"), Err(LocationError::UnknownScheme { .. })));
        assert!(matches!(Target::parse("-"), Err(LocationError::WrongRole { .. })));
        assert!(matches!(Target::parse("dynamodb://T"), Err(LocationError::WrongRole { .. })));
        assert_eq!(Target::parse("s3://b/p").unwrap().to_string(), "s3://b/p");
    }
}
