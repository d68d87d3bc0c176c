//! `etl ballista scheduler` and `etl ballista executor`: the parts of a Ballista cluster that
//! `etl sql --ballista` runs queries on, built from the same DataFusion as etl (the upstream
//! `ballista-scheduler` and `ballista-executor` 55 binaries are the same parts; untested). The work is
//! [`crate::sql::cluster`]'s; each runs until stopped (SIGINT or SIGTERM).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::{ExitStatus, Printer};

#[derive(Debug, Subcommand)]
pub enum BallistaCommand {
    /// Run a scheduler: it plans each query into stages and hands their tasks to executors.
    Scheduler(SchedulerArgs),
    /// Run an executor: it runs tasks and serves their results (Arrow Flight). It must read the
    /// tables' files at the paths the client sees (a shared mount), or from `s3://` with its own
    /// credentials.
    Executor(ExecutorArgs),
}

#[derive(Debug, Args)]
pub struct SchedulerArgs {
    /// The address to listen on (gRPC, for executors and `etl sql --ballista`).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:50050")]
    pub bind: SocketAddr,
    /// The host executors and clients reach the scheduler by [default: the `--bind` address].
    #[arg(long, value_name = "HOST")]
    pub external_host: Option<String>,
}

#[derive(Debug, Args)]
pub struct ExecutorArgs {
    /// The scheduler to join: `HOST:PORT`.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:50050", value_parser = parse_host_port)]
    pub scheduler: (String, u16),
    /// The host to listen on.
    #[arg(long, value_name = "HOST", default_value = "127.0.0.1")]
    pub bind_host: String,
    /// The port that serves task results (Arrow Flight) to other executors and clients.
    #[arg(long, value_name = "PORT", default_value_t = 50051)]
    pub port: u16,
    /// The port the scheduler sends tasks to.
    #[arg(long, value_name = "PORT", default_value_t = 50052)]
    pub grpc_port: u16,
    /// The host the scheduler and clients reach this executor by [default: `--bind-host`].
    #[arg(long, value_name = "HOST")]
    pub external_host: Option<String>,
    /// Tasks run at once [default: one per CPU].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrent_tasks: Option<u16>,
    /// Where shuffle files are written [default: a temporary folder].
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
}

/// `HOST:PORT`, the port 1 to 65535.
fn parse_host_port(s: &str) -> Result<(String, u16), String> {
    let bad = || format!("`{s}` is not `HOST:PORT`");
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let port = port.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(bad)?;
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_owned(), port))
}

pub fn run(cmd: BallistaCommand, printer: &Printer) -> ExitStatus {
    imp::run(cmd, printer)
}

#[cfg(feature = "ballista")]
mod imp {
    use super::{BallistaCommand, ExitStatus, Printer};
    use crate::sql::cluster::{self, ExecutorOptions, SchedulerOptions};

    pub fn run(cmd: BallistaCommand, printer: &Printer) -> ExitStatus {
        // Ballista's servers want a large stack for deep plans, as its own binaries give them.
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_stack_size(32 * 1024 * 1024)
            .build()
        {
            Ok(r) => r,
            Err(e) => {
                printer.error(&format!("cannot start the runtime: {e}"), None);
                return ExitStatus::Error;
            }
        };
        let served = runtime.block_on(async {
            match cmd {
                BallistaCommand::Scheduler(a) => {
                    let external_host = a.external_host.unwrap_or_else(|| a.bind.ip().to_string());
                    printer.info(&format!(
                        "ballista scheduler listening on {} (df://{external_host}:{})",
                        a.bind,
                        a.bind.port()
                    ));
                    let serve = cluster::run_scheduler(SchedulerOptions { bind: a.bind, external_host });
                    until_stopped(serve).await
                }
                BallistaCommand::Executor(a) => {
                    let (scheduler_host, scheduler_port) = a.scheduler;
                    printer.info(&format!(
                        "ballista executor on {}:{} (tasks on port {}), joining {scheduler_host}:{scheduler_port}",
                        a.bind_host, a.port, a.grpc_port
                    ));
                    let serve = cluster::run_executor(ExecutorOptions {
                        scheduler_host,
                        scheduler_port,
                        bind_host: a.bind_host,
                        port: a.port,
                        grpc_port: a.grpc_port,
                        external_host: a.external_host,
                        concurrent_tasks: a.concurrent_tasks.map_or(0, usize::from),
                        work_dir: a.work_dir,
                    });
                    until_stopped(serve).await
                }
            }
        });
        match served {
            Ok(()) => ExitStatus::Success,
            Err(e) => {
                printer.error(&e.to_string(), Some("check that the ports are free and the scheduler is reachable"));
                ExitStatus::Error
            }
        }
    }

    /// Serves until the server stops by itself or the process gets SIGINT or SIGTERM (a stop asked
    /// for is success).
    async fn until_stopped(
        serve: impl std::future::Future<Output = Result<(), cluster::ClusterError>>,
    ) -> Result<(), cluster::ClusterError> {
        #[cfg(unix)]
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            r = serve => r,
            _ = tokio::signal::ctrl_c() => Ok(()),
            () = term => Ok(()),
        }
    }
}

#[cfg(not(feature = "ballista"))]
mod imp {
    use super::{BallistaCommand, ExitStatus, Printer};

    pub fn run(_cmd: BallistaCommand, printer: &Printer) -> ExitStatus {
        printer.error(
            "this etl was built without the `ballista` feature",
            Some("build it with `cargo build --release --features ballista`"),
        );
        ExitStatus::Error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ports_parse() {
        assert_eq!(parse_host_port("127.0.0.1:50050"), Ok(("127.0.0.1".into(), 50050)));
        assert_eq!(parse_host_port("scheduler:7"), Ok(("scheduler".into(), 7)));
        for bad in ["scheduler", ":50050", "h:0", "h:x", "h:70000"] {
            assert!(parse_host_port(bad).is_err(), "{bad}");
        }
    }
}
