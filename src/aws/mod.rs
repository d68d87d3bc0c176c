//! The DynamoDB control plane: the client, its retry policy and errors, live scans and exports.
//! It never reads or writes data files in object storage; that is [`crate::store`]'s job.
//!
//! Credentials and region come from `aws-config`'s default chain, so etl behaves like the AWS
//! CLI: environment variables, shared config and credential files with profiles (including SSO
//! and `credential_process`), web identity, and container and instance roles. `--region`,
//! `--profile` and `--endpoint-url` (or `AWS_ENDPOINT_URL`) override it. A `--profile` that
//! neither shared file defines is an error before any call ([`AwsOptions::check_profile`]), as
//! in the AWS CLI: the SDK's chain would otherwise fall through to other credentials (or report
//! only a missing region) without naming the profile.

pub mod dynamodb;
pub mod export;

use std::borrow::Cow;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_runtime::env_config::file::EnvConfigFiles;
use aws_types::os_shim_internal::{Env, Fs};

/// `--profile` names a profile the shared config and credentials files do not define, or the
/// files cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error(
        "AWS profile `{name}` is not defined in the shared config file (`{config}`) or credentials file (`{credentials}`)"
    )]
    Undefined { name: String, config: String, credentials: String },
    #[error("cannot read the AWS shared config files for profile `{name}`: {reason}")]
    Unreadable { name: String, reason: String },
}

impl ProfileError {
    pub fn hint(&self) -> Option<String> {
        match self {
            ProfileError::Undefined { .. } => Some(
                "check `--profile`; `aws configure list-profiles` lists the defined ones \
                 (the files are found through `AWS_CONFIG_FILE` and `AWS_SHARED_CREDENTIALS_FILE`)"
                    .into(),
            ),
            ProfileError::Unreadable { .. } => None,
        }
    }
}

/// The path a shared file is read from: the variable when set, else the default under `~`.
fn shared_file(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

/// Where and as whom to call AWS.
#[derive(Debug, Clone, Default)]
pub struct AwsOptions {
    pub region: Option<String>,
    pub profile: Option<String>,
    /// An S3- or DynamoDB-compatible endpoint such as `http://127.0.0.1:5000`.
    pub endpoint_url: Option<String>,
}

impl AwsOptions {
    /// Checks that `--profile`, when given, is defined in the shared config or credentials file.
    pub async fn check_profile(&self) -> Result<(), ProfileError> {
        let Some(name) = &self.profile else { return Ok(()) };
        let set = aws_config::profile::load(
            &Fs::real(),
            &Env::real(),
            &EnvConfigFiles::default(),
            Some(Cow::Owned(name.clone())),
        )
        .await
        .map_err(|e| ProfileError::Unreadable { name: name.clone(), reason: e.to_string() })?;
        if set.get_profile(name).is_some() {
            return Ok(());
        }
        Err(ProfileError::Undefined {
            name: name.clone(),
            config: shared_file("AWS_CONFIG_FILE", "~/.aws/config"),
            credentials: shared_file("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"),
        })
    }

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
