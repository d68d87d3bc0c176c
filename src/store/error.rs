//! Object-store failures, classified by their typed kind (never by message text), each with a
//! hint about what to check.

use std::error::Error as StdError;

use object_store::client::{HttpError, HttpErrorKind};

/// What kind of failure an object-store call had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectErrorKind {
    /// No object or bucket at that key (HTTP 404).
    NotFound,
    /// The credentials may not do this (HTTP 403).
    PermissionDenied,
    /// The credentials were refused (HTTP 401, bad signature or key id).
    Unauthenticated,
    /// The credential chain found no credentials at all.
    NoCredentials,
    /// A conditional write lost: someone else wrote the object first (HTTP 412).
    Precondition,
    /// The object exists and was not to be replaced (HTTP 409, or `If-None-Match` on a new key).
    AlreadyExists,
    /// The endpoint could not be reached or did not answer in time.
    Unreachable,
    /// Anything else the store reported.
    Other,
}

impl ObjectErrorKind {
    /// Classifies an `object_store` error by its variant and, for transport failures, by the
    /// [`HttpErrorKind`] found among its sources.
    pub fn of(e: &object_store::Error) -> ObjectErrorKind {
        use object_store::Error as E;
        match e {
            E::NotFound { .. } => ObjectErrorKind::NotFound,
            E::PermissionDenied { .. } => ObjectErrorKind::PermissionDenied,
            E::Unauthenticated { source, .. } if source.downcast_ref::<super::s3::NoCredentials>().is_some() => {
                ObjectErrorKind::NoCredentials
            }
            E::Unauthenticated { .. } => ObjectErrorKind::Unauthenticated,
            E::Precondition { .. } => ObjectErrorKind::Precondition,
            E::AlreadyExists { .. } => ObjectErrorKind::AlreadyExists,
            other => {
                let mut src: Option<&(dyn StdError + 'static)> = other.source();
                while let Some(s) = src {
                    if let Some(h) = s.downcast_ref::<HttpError>()
                        && matches!(h.kind(), HttpErrorKind::Connect | HttpErrorKind::Timeout)
                    {
                        return ObjectErrorKind::Unreachable;
                    }
                    if let Some(io) = s.downcast_ref::<std::io::Error>()
                        && matches!(
                            io.kind(),
                            std::io::ErrorKind::ConnectionRefused
                                | std::io::ErrorKind::TimedOut
                                | std::io::ErrorKind::NotConnected
                        )
                    {
                        return ObjectErrorKind::Unreachable;
                    }
                    src = s.source();
                }
                ObjectErrorKind::Other
            }
        }
    }

    pub fn hint(self) -> &'static str {
        match self {
            ObjectErrorKind::NotFound => "check the bucket name, the key and `--region`",
            ObjectErrorKind::PermissionDenied => {
                "access denied: check the credentials etl uses (`AWS_PROFILE`, `aws sts get-caller-identity`) and the bucket policy"
            }
            ObjectErrorKind::Unauthenticated | ObjectErrorKind::NoCredentials => {
                "check your AWS credentials (`AWS_PROFILE`, `aws sso login`, or `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`)"
            }
            ObjectErrorKind::Precondition | ObjectErrorKind::AlreadyExists => {
                "another run wrote the same output at the same time; run again once it has finished"
            }
            ObjectErrorKind::Unreachable => {
                "the endpoint did not answer: check `--endpoint-url`/`AWS_ENDPOINT_URL`, `--region` and your network"
            }
            ObjectErrorKind::Other => "check the URL, `--region` and `--endpoint-url`",
        }
    }
}

/// A failed object-store call.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot {action} `{url}`: {message}")]
pub struct StoreError {
    pub action: &'static str,
    pub url: String,
    pub kind: ObjectErrorKind,
    pub message: String,
}

impl StoreError {
    pub fn object(action: &'static str, url: &str, e: &object_store::Error) -> StoreError {
        StoreError { action, url: url.to_owned(), kind: ObjectErrorKind::of(e), message: error_text(e) }
    }

    pub fn hint(&self) -> &'static str {
        self.kind.hint()
    }
}

/// The error's text with its sources (object_store nests the HTTP cause), with an S3 XML error
/// body shortened to its code and message.
pub fn error_text(e: &(dyn StdError + 'static)) -> String {
    let mut text = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let t = s.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        src = s.source();
    }
    shorten_xml(&text)
}

fn shorten_xml(text: &str) -> String {
    let Some(start) = text.find("<?xml").or_else(|| text.find("<Error>")) else { return text.to_owned() };
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let from = text[start..].find(&open)? + start + open.len();
        let to = text[from..].find('<')? + from;
        Some(text[from..to].to_owned())
    };
    let mut out = text[..start].trim_end().to_owned();
    match (tag("Code"), tag("Message")) {
        (Some(code), Some(message)) => out.push_str(&format!(" {code}: {message}")),
        (Some(code), None) => out.push_str(&format!(" {code}")),
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_errors_are_shortened() {
        let t = "GET http://h/b?x - Server returned non-2xx status code: 404 Not Found: <?xml version=\"1.0\"?>\n<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message><RequestId>1</RequestId></Error>";
        assert_eq!(
            shorten_xml(t),
            "GET http://h/b?x - Server returned non-2xx status code: 404 Not Found: NoSuchBucket: The specified bucket does not exist"
        );
        assert_eq!(shorten_xml("plain"), "plain");
    }

    #[test]
    fn kinds_come_from_variants() {
        let nf = object_store::Error::NotFound { path: "k".into(), source: "gone".into() };
        assert_eq!(ObjectErrorKind::of(&nf), ObjectErrorKind::NotFound);
        let pd = object_store::Error::PermissionDenied { path: "k".into(), source: "no".into() };
        assert_eq!(ObjectErrorKind::of(&pd), ObjectErrorKind::PermissionDenied);
        let nc = object_store::Error::Unauthenticated {
            path: String::new(),
            source: Box::new(super::super::s3::NoCredentials("none".into())),
        };
        assert_eq!(ObjectErrorKind::of(&nc), ObjectErrorKind::NoCredentials);
        let io = object_store::Error::Generic {
            store: "S3",
            source: Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
        };
        assert_eq!(ObjectErrorKind::of(&io), ObjectErrorKind::Unreachable);
        let e = StoreError::object("read", "s3://b/k", &nf);
        assert!(e.to_string().starts_with("cannot read `s3://b/k`: "), "{e}");
    }
}
