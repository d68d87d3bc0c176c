//! S3 through `object_store`: the store for one bucket, with credentials from `aws-config`.
//!
//! `object_store` is the client DataFusion already uses, so the S3 source, the S3 sink and
//! `etl sql --data s3://` share one code path. Credentials are not resolved by `object_store`'s
//! own (smaller) chain but by `aws-config` through [`SdkCredentials`], so profiles, SSO,
//! `credential_process`, web identity and container and instance roles all work as in the AWS
//! CLI. Secrets never reach a log line: only the access key id's last four characters may.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use aws_credential_types::provider::{ProvideCredentials as _, SharedCredentialsProvider};
use object_store::aws::{AmazonS3, AmazonS3Builder, AwsCredential, S3ConditionalPut};
use object_store::{BackoffConfig, ClientOptions, CredentialProvider, RetryConfig};

use super::StoreError;
use crate::aws::AwsOptions;

/// `aws-config`'s credential chain as an `object_store` credential provider.
pub struct SdkCredentials(SharedCredentialsProvider);

impl fmt::Debug for SdkCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SdkCredentials(aws-config default chain)")
    }
}

impl CredentialProvider for SdkCredentials {
    type Credential = AwsCredential;

    fn get_credential<'a, 'b>(
        &'a self,
    ) -> Pin<Box<dyn Future<Output = object_store::Result<Arc<AwsCredential>>> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async move {
            let c = self.0.provide_credentials().await.map_err(|e| object_store::Error::Unauthenticated {
                path: String::new(),
                source: Box::new(NoCredentials(credential_error_text(&e))),
            })?;
            Ok(Arc::new(AwsCredential {
                key_id: c.access_key_id().to_owned(),
                secret_key: c.secret_access_key().to_owned(),
                token: c.session_token().map(str::to_owned),
            }))
        })
    }
}

/// The credential chain found no usable credentials (the text says why, never a secret).
#[derive(Debug, thiserror::Error)]
#[error("no AWS credentials: {0}")]
pub struct NoCredentials(pub String);

/// The error's own text and its sources', never the credentials.
fn credential_error_text(e: &aws_credential_types::provider::error::CredentialsError) -> String {
    let mut text = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        text.push_str(": ");
        text.push_str(&s.to_string());
        src = s.source();
    }
    text
}

/// How long S3 requests may take and how often they are retried (throttling, 5xx, timeouts and
/// connection errors, with exponential backoff). `object_store`'s backoff is jittered: each wait
/// is drawn between `init_backoff` and twice the previous one, so ten retries wait at least ten
/// `init_backoff`s. At 200 ms that rides out at least two seconds of throttling or 5xx answers
/// (S3's `SlowDown` comes in bursts), usually far more; at 100 ms a 1.5 s burst could exhaust
/// them (the fault suite's 503 burst did once). The timeout keeps an unreachable endpoint
/// failing in well under a minute instead of `object_store`'s default three.
fn retry_config() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
            base: 2.0,
        },
        max_retries: 10,
        retry_timeout: Duration::from_secs(30),
    }
}

/// Where S3 is for these options: the region (`us-east-1` unless configured) and the endpoint
/// (`--endpoint-url`, else the shared config's), without credentials.
pub struct S3Place {
    pub region: String,
    pub endpoint: Option<String>,
}

impl S3Place {
    fn of(sdk: &aws_types::SdkConfig, opts: &AwsOptions) -> S3Place {
        S3Place {
            region: sdk.region().map(|r| r.to_string()).unwrap_or_else(|| "us-east-1".to_owned()),
            endpoint: opts.endpoint_url.clone().or_else(|| sdk.endpoint_url().map(str::to_owned)),
        }
    }

    pub async fn resolve(opts: &AwsOptions) -> S3Place {
        S3Place::of(&opts.sdk_config().await, opts)
    }
}

/// A store for `bucket` with the options' region, endpoint and credentials.
pub async fn store(bucket: &str, opts: &AwsOptions) -> Result<Arc<AmazonS3>, StoreError> {
    let sdk = opts.sdk_config().await;
    let S3Place { region, endpoint } = S3Place::of(&sdk, opts);
    let mut b = AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_region(region)
        .with_retry(retry_config())
        // The commit of an output is a conditional PUT (`If-Match` / `If-None-Match`).
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        .with_client_options(
            ClientOptions::new().with_connect_timeout(Duration::from_secs(5)).with_timeout(Duration::from_secs(120)),
        );
    if let Some(endpoint) = endpoint {
        b = b.with_allow_http(endpoint.starts_with("http://")).with_endpoint(endpoint);
    }
    match sdk.credentials_provider() {
        Some(p) => b = b.with_credentials(Arc::new(SdkCredentials(p))),
        None => b = b.with_skip_signature(true),
    }
    b.build().map(Arc::new).map_err(|e| StoreError::object("connect to", &format!("s3://{bucket}"), &e))
}
