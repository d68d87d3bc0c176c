//! Distributed SQL on an Apache DataFusion Ballista cluster (feature `ballista`): the client side
//! of a [`super::Session`] (`etl sql --ballista df://HOST:PORT`), and the scheduler and executor
//! processes `etl ballista scheduler|executor` runs.
//!
//! A remote session plans locally, as any session does (so the read-only checks are the same),
//! and sends the plan to the scheduler, which splits it into stages run by the executors. The
//! plan travels as DataFusion's protobuf, so every table is one Ballista can serialize: a
//! `ListingTable` over exactly the files the commit lists (plain outputs, and each Delta table's
//! files at the version read), or an `EmptyTable`. The executors read those files themselves: a
//! path every machine mounts at the same place, or `s3://`.

use std::fmt;
use std::str::FromStr;

/// The scheduler a remote session runs on: `df://HOST[:PORT]`, as Ballista writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterUrl {
    pub host: String,
    pub port: u16,
}

/// The port Ballista's scheduler listens on unless told otherwise.
pub const DEFAULT_SCHEDULER_PORT: u16 = 50050;

/// Why a `--ballista` URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{url}` is not a Ballista scheduler URL: {reason}")]
pub struct BadClusterUrl {
    pub url: String,
    pub reason: &'static str,
}

impl BadClusterUrl {
    pub fn hint(&self) -> &'static str {
        "write the scheduler as `df://HOST:PORT`, for example `df://127.0.0.1:50050`"
    }
}

impl FromStr for ClusterUrl {
    type Err = BadClusterUrl;

    fn from_str(s: &str) -> Result<ClusterUrl, BadClusterUrl> {
        let bad = |reason| BadClusterUrl { url: s.to_owned(), reason };
        let rest = s.strip_prefix("df://").ok_or_else(|| bad("it does not start with `df://`"))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@']) {
            return Err(bad("it has more than a host and a port"));
        }
        let (host, port) = match rest.rsplit_once(':') {
            // An IPv6 address without a port: `[::1]`.
            Some((h, p)) if !p.ends_with(']') => {
                (h, p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| bad("its port is not 1 to 65535"))?)
            }
            _ => (rest, DEFAULT_SCHEDULER_PORT),
        };
        if host.is_empty() {
            return Err(bad("it names no host"));
        }
        Ok(ClusterUrl { host: host.to_owned(), port })
    }
}

impl fmt::Display for ClusterUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "df://{}:{}", self.host, self.port)
    }
}

#[cfg(feature = "ballista")]
pub use enabled::*;

/// Without the `ballista` feature a remote session is refused, with a hint to build it in.
#[cfg(not(feature = "ballista"))]
pub async fn remote_context(
    url: &ClusterUrl,
    _config: datafusion::prelude::SessionConfig,
    _runtime: std::sync::Arc<datafusion::execution::runtime_env::RuntimeEnv>,
    _s3: Option<&crate::store::s3::S3Place>,
) -> Result<datafusion::prelude::SessionContext, crate::sql::SqlError> {
    Err(crate::sql::SqlError::NoBallista { url: url.clone() })
}

#[cfg(feature = "ballista")]
mod enabled {
    use std::net::SocketAddr;
    use std::path::PathBuf;
    use std::sync::Arc;

    use ballista::prelude::SessionContextExt as _;
    use ballista_core::object_store::{
        S3Options, runtime_env_with_s3_support, session_config_with_s3_support, session_state_with_s3_support,
    };
    use datafusion::execution::SessionStateBuilder;
    use datafusion::execution::runtime_env::RuntimeEnv;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use super::ClusterUrl;
    use crate::sql::SqlError;
    use crate::store::s3::S3Place;

    /// A session whose queries run on the cluster at `url`. `config` and `runtime` are the local
    /// session's: tables are registered and statements planned here, as locally.
    ///
    /// For an `s3://` output, `s3` says where S3 is (region, endpoint); the session sends that to
    /// the cluster as Ballista's `s3.*` settings, never credentials: the executors sign with
    /// their own (environment variables or the instance's role).
    pub async fn remote_context(
        url: &ClusterUrl,
        config: SessionConfig,
        runtime: Arc<RuntimeEnv>,
        s3: Option<&S3Place>,
    ) -> Result<SessionContext, SqlError> {
        let mut config = config.with_option_extension(S3Options::default());
        if let Some(place) = s3 {
            let options = config.options_mut();
            options.set("s3.region", &place.region)?;
            if let Some(endpoint) = &place.endpoint {
                options.set("s3.endpoint", endpoint)?;
                options.set("s3.allow_http", if endpoint.starts_with("http://") { "true" } else { "false" })?;
            }
        }
        let state =
            SessionStateBuilder::new().with_config(config).with_runtime_env(runtime).with_default_features().build();
        Ok(SessionContext::remote_with_state(&url.to_string(), state).await?)
    }

    /// How `etl ballista scheduler` listens.
    #[derive(Debug, Clone)]
    pub struct SchedulerOptions {
        /// The address to listen on.
        pub bind: SocketAddr,
        /// The host executors and clients reach the scheduler by.
        pub external_host: String,
    }

    /// Runs a Ballista scheduler until the process is stopped. Executors and sessions read
    /// `s3://` tables with the `s3.*` settings a session sends (Ballista's own S3 wiring).
    pub async fn run_scheduler(opts: SchedulerOptions) -> Result<(), ClusterError> {
        use ballista_scheduler::cluster::BallistaCluster;
        use ballista_scheduler::config::SchedulerConfig;
        let mut config = SchedulerConfig {
            bind_host: opts.bind.ip().to_string(),
            bind_port: opts.bind.port(),
            external_host: opts.external_host,
            ..SchedulerConfig::default()
        };
        config = config
            .with_override_config_producer(Arc::new(session_config_with_s3_support))
            .with_override_session_builder(Arc::new(session_state_with_s3_support));
        let cluster = BallistaCluster::new_from_config(&config).await.map_err(ClusterError::Ballista)?;
        ballista_scheduler::scheduler_process::start_server(cluster, opts.bind, Arc::new(config))
            .await
            .map_err(ClusterError::Ballista)
    }

    /// How `etl ballista executor` joins a scheduler.
    #[derive(Debug, Clone)]
    pub struct ExecutorOptions {
        /// The scheduler's host and gRPC port.
        pub scheduler_host: String,
        pub scheduler_port: u16,
        /// The address to listen on: `port` serves results (Arrow Flight), `grpc_port` takes tasks.
        pub bind_host: String,
        pub port: u16,
        pub grpc_port: u16,
        /// The host the scheduler and clients reach this executor by [default: `bind_host`].
        pub external_host: Option<String>,
        /// Tasks run at once [0: one per CPU].
        pub concurrent_tasks: usize,
        /// Where shuffle files go [default: a temporary folder].
        pub work_dir: Option<PathBuf>,
    }

    /// Runs a Ballista executor until the process is stopped.
    pub async fn run_executor(opts: ExecutorOptions) -> Result<(), ClusterError> {
        use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
        let config = ExecutorProcessConfig {
            bind_host: opts.bind_host,
            external_host: opts.external_host,
            port: opts.port,
            grpc_port: opts.grpc_port,
            scheduler_host: opts.scheduler_host,
            scheduler_port: opts.scheduler_port,
            vcores: opts.concurrent_tasks,
            work_dir: opts.work_dir.map(|p| p.display().to_string()),
            override_config_producer: Some(Arc::new(session_config_with_s3_support)),
            override_runtime_producer: Some(Arc::new(runtime_env_with_s3_support)),
            ..ExecutorProcessConfig::default()
        };
        start_executor_process(Arc::new(config)).await.map_err(ClusterError::Ballista)
    }

    /// Why a scheduler or an executor stopped.
    #[derive(Debug, thiserror::Error)]
    pub enum ClusterError {
        #[error("ballista: {0}")]
        Ballista(ballista_core::error::BallistaError),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_parse_at_the_edge() {
        let ok = |s: &str| s.parse::<ClusterUrl>().unwrap();
        assert_eq!(ok("df://127.0.0.1:50050"), ClusterUrl { host: "127.0.0.1".into(), port: 50050 });
        assert_eq!(ok("df://scheduler"), ClusterUrl { host: "scheduler".into(), port: DEFAULT_SCHEDULER_PORT });
        assert_eq!(ok("df://scheduler:7000/"), ClusterUrl { host: "scheduler".into(), port: 7000 });
        assert_eq!(ok("df://[::1]:7000"), ClusterUrl { host: "[::1]".into(), port: 7000 });
        assert_eq!(ok("df://[::1]"), ClusterUrl { host: "[::1]".into(), port: DEFAULT_SCHEDULER_PORT });
        assert_eq!(ok("df://h:1").to_string(), "df://h:1");
        for (bad, why) in [
            ("http://h:1", "does not start"),
            ("df://", "no host"),
            ("df://:50050", "no host"),
            ("df://h:0", "port"),
            ("df://h:99999", "port"),
            ("df://h:x", "port"),
            ("df://h:1/db", "more than"),
            ("df://u@h:1", "more than"),
        ] {
            let e = bad.parse::<ClusterUrl>().unwrap_err();
            assert!(e.reason.contains(why), "{bad}: {e}");
            assert!(e.to_string().starts_with(&format!("`{bad}`")), "{e}");
        }
    }
}
