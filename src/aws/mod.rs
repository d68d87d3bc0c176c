//! The DynamoDB control plane: the client, its retry policy and errors, live scans and exports.
//! It never reads or writes data files in object storage; that is [`crate::store`]'s job.
//!
//! Credentials and region come from `aws-config`'s default chain, so etl behaves like the AWS
//! CLI: environment variables, shared config and credential files with profiles (including SSO
//! and `credential_process`), web identity, and container and instance roles. `--region`,
//! `--profile` and `--endpoint-url` (or `AWS_ENDPOINT_URL`) override it.

pub mod dynamodb;
pub mod export;

use aws_config::{BehaviorVersion, Region, SdkConfig};

/// Where and as whom to call AWS.
#[derive(Debug, Clone, Default)]
pub struct AwsOptions {
    pub region: Option<String>,
    pub profile: Option<String>,
    /// An S3- or DynamoDB-compatible endpoint such as `http://127.0.0.1:5000`.
    pub endpoint_url: Option<String>,
}

impl AwsOptions {
    /// The SDK configuration from the default chain with these overrides.
    pub async fn sdk_config(&self) -> SdkConfig {
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        if let Some(profile) = &self.profile {
            loader = loader.profile_name(profile);
        }
        if let Some(region) = &self.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(endpoint) = &self.endpoint_url {
            loader = loader.endpoint_url(endpoint);
        }
        loader.load().await
    }
}
