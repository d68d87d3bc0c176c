//! Flags shared by every command that talks to AWS.

use clap::Args;

use crate::aws::AwsOptions;

/// Region, profile and endpoint; credentials come from the AWS default chain.
#[derive(Debug, Clone, Default, Args)]
pub struct AwsArgs {
    /// AWS region [default: from the profile or `AWS_REGION`, else us-east-1 for S3].
    #[arg(long, value_name = "REGION")]
    pub region: Option<String>,
    /// Named profile from `~/.aws/config` (SSO and `credential_process` profiles work).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// S3/DynamoDB-compatible endpoint, such as a local test server.
    #[arg(long, value_name = "URL", env = "AWS_ENDPOINT_URL")]
    pub endpoint_url: Option<String>,
}

impl AwsArgs {
    pub fn options(&self) -> AwsOptions {
        AwsOptions {
            region: self.region.clone(),
            profile: self.profile.clone(),
            endpoint_url: self.endpoint_url.clone(),
        }
    }
}
