//! SQL over a committed output: a DataFusion `SessionContext` whose tables are exactly the files
//! listed in `_etl/run.json`, read-only unless asked otherwise, with memory and time limits. A
//! table that is a Delta table (`DIR/<table>/_delta_log/`, written by `--format delta`) is read
//! through deltalake's table provider at the version `_etl/run.json` records, or, with `--as-of`,
//! at the versions an earlier run left (the output's `delta_history`).
//!
//! Knows nothing of how the tables were made; reads only what the sink committed. Printing
//! results is [`format`]'s job; the interactive shell lives in the CLI.

pub mod cluster;
pub mod format;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use datafusion::sql::parser::{DFParser, Statement as DfStatement};

use crate::sink::RunManifest;
pub use crate::sink::manifest::AsOf;
use crate::sink::manifest::RUN_MANIFEST;
use crate::store::{self, ObjectUrl, StoreError, Target};

/// Why a query could not run.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    #[error("`{path}` is not a committed etl output (no readable `_etl/run.json`): {reason}")]
    NotAnOutput { path: String, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{kind} is not allowed: `etl sql` is read-only by default")]
    Forbidden { kind: String },
    #[error("query failed: {0}")]
    DataFusion(#[from] datafusion::error::DataFusionError),
    #[error("query stopped after the `--timeout` of {0:?}")]
    Timeout(Duration),
    #[error("parameter `{0}` is not `name=value`")]
    BadParam(String),
    #[error("no statement to run")]
    Empty,
    /// The text is not SQL the parser reads (the parser's message, with line and column).
    #[error("cannot parse the SQL: {0}")]
    Syntax(String),
    #[error("no table `{name}` in `{data}`")]
    UnknownTable {
        name: String,
        /// The output's folder or URL.
        data: String,
        /// The output's tables.
        known: Vec<String>,
    },
    #[error("cannot {action} `{path}`: {source}")]
    Io { action: &'static str, path: String, source: std::io::Error },
    #[error(transparent)]
    Delta(#[from] crate::sink::delta::DeltaError),
    #[error("`--as-of` reads earlier versions of Delta tables, but `{path}` is not a Delta output")]
    AsOfNotDelta { path: String },
    #[error(
        "`{path}` has no state at {as_of}: its history runs from version 0 ({first}) to version {last} ({last_at})"
    )]
    AsOfOutOfRange { path: String, as_of: AsOf, first: String, last: u64, last_at: String },
    #[error("`--ballista {url}` needs an etl built with the `ballista` feature")]
    NoBallista { url: cluster::ClusterUrl },
    #[error("the Delta table `{table}` cannot run on a Ballista cluster: {reason}")]
    NotDistributable { table: String, reason: String },
}

impl SqlError {
    /// Whether the query needed more memory than `--memory-limit` allows, however deep DataFusion
    /// wrapped the error (`Context`, `Shared`, `External`, Arrow's external errors).
    pub fn is_resources_exhausted(&self) -> bool {
        matches!(self, SqlError::DataFusion(e)
            if matches!(e.find_root(), datafusion::error::DataFusionError::ResourcesExhausted(_)))
    }

    pub fn hint(&self) -> Option<String> {
        match self {
            SqlError::NotAnOutput { .. } => {
                Some("point `--data` at a folder or `s3://` prefix written by `etl unwind --out`".into())
            }
            SqlError::Store(e) => Some(e.hint().to_owned()),
            SqlError::Forbidden { .. } => {
                Some("pass `--allow-write` to allow statements that change files, tables or settings".into())
            }
            e if e.is_resources_exhausted() => Some("raise `--memory-limit`, or narrow the query".into()),
            SqlError::Timeout(_) => Some("raise `--timeout`, or narrow the query".into()),
            SqlError::UnknownTable { name, known, .. } => Some(unknown_table_hint(name, known)),
            SqlError::Delta(e) => e.hint().map(Into::into),
            SqlError::AsOfNotDelta { .. } => Some(
                "time travel needs an output written with `etl unwind --format delta` (a Parquet output keeps only its latest state)".into(),
            ),
            SqlError::AsOfOutOfRange { .. } => {
                Some("`--as-of` takes an output version or a time; `_etl/run.json` lists them under `delta_history`".into())
            }
            SqlError::NoBallista { .. } => {
                Some("build it with `cargo build --release --features ballista`, or drop `--ballista` to run here".into())
            }
            SqlError::NotDistributable { .. } => Some("drop `--ballista` to read it with deltalake here".into()),
            _ => None,
        }
    }
}

/// A parse error as [`SqlError::Syntax`]: the parser's own message once, not wrapped twice.
fn syntax_error(e: datafusion::error::DataFusionError) -> SqlError {
    use datafusion::sql::sqlparser::parser::ParserError;
    match e {
        datafusion::error::DataFusionError::SQL(p, _) => match *p {
            ParserError::ParserError(m) | ParserError::TokenizerError(m) => SqlError::Syntax(m),
            ParserError::RecursionLimitExceeded => {
                SqlError::Syntax("the statement nests deeper than the parser reads".into())
            }
        },
        other => other.into(),
    }
}

/// A likely typo's correction among `known`, then the tables there are (the first 20).
fn unknown_table_hint(name: &str, known: &[String]) -> String {
    const LISTED: usize = 20;
    let names: Vec<&str> = known.iter().map(String::as_str).collect();
    let mut hint = match crate::mapping::suggest::closest(name, &names) {
        Some(c) => format!("did you mean `{c}`? "),
        None => String::new(),
    };
    if names.is_empty() {
        hint.push_str("the output has no tables");
        return hint;
    }
    let listed = crate::mapping::suggest::backticked(&names[..names.len().min(LISTED)]);
    hint.push_str(&format!("the tables are {listed}"));
    if names.len() > LISTED {
        hint.push_str(&format!(" and {} more (`\\d` lists them all)", names.len() - LISTED));
    }
    // SQL folds an unquoted name to lowercase: `Order` reads table `order`.
    if let Some(n) = names.iter().find(|n| n.eq_ignore_ascii_case(name) && **n != name) {
        hint.push_str(&format!("; quote a name that is not all lowercase: `\"{n}\"`"));
    }
    hint
}

/// Settings of an SQL session.
#[derive(Debug, Clone)]
pub struct SqlOptions {
    /// The committed output to read.
    pub data: Target,
    pub allow_write: bool,
    pub memory_limit: Option<usize>,
    pub timeout: Option<Duration>,
    pub params: Vec<String>,
    /// Read the Delta tables as an earlier run left them.
    pub as_of: Option<AsOf>,
    /// Run queries on this Ballista cluster instead of here.
    pub cluster: Option<cluster::ClusterUrl>,
}

impl SqlOptions {
    /// A read-only session over `data` without limits or parameters.
    pub fn new(data: Target) -> SqlOptions {
        SqlOptions {
            data,
            allow_write: false,
            memory_limit: None,
            timeout: None,
            params: Vec::new(),
            as_of: None,
            cluster: None,
        }
    }
}

/// A table of the output, as the run report lists it.
#[derive(Debug, Clone)]
pub struct TableInfo {
    pub name: String,
    pub rows: u64,
    /// The table's files as URLs.
    pub files: Vec<String>,
    pub schema: SchemaRef,
    /// A Delta table: the version read and its commit.
    pub delta: Option<DeltaInfo>,
}

/// The version of a Delta table a session reads, as `\d` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaInfo {
    pub version: u64,
    /// The commit's time (RFC 3339, UTC) and operation, from its `commitInfo`.
    pub committed_at: Option<String>,
    pub operation: Option<String>,
}

/// A DataFusion session over one committed output.
pub struct Session {
    ctx: SessionContext,
    tables: Vec<TableInfo>,
    data_dir: String,
    opts: SqlOptions,
    params: Option<ParamValues>,
}

/// The result of one statement.
#[derive(Debug)]
pub struct QueryResult {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
}

impl QueryResult {
    pub fn rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}

fn parse_params(params: &[String]) -> Result<Option<ParamValues>, SqlError> {
    if params.is_empty() {
        return Ok(None);
    }
    let mut map = HashMap::new();
    for p in params {
        let (name, value) = p.split_once('=').ok_or_else(|| SqlError::BadParam(p.clone()))?;
        let name = name.trim().trim_start_matches('$');
        if name.is_empty() {
            return Err(SqlError::BadParam(p.clone()));
        }
        let scalar = if let Ok(i) = value.parse::<i64>() {
            ScalarValue::Int64(Some(i))
        } else {
            ScalarValue::Utf8(Some(value.to_owned()))
        };
        map.insert(name.to_owned(), scalar.into());
    }
    Ok(Some(ParamValues::Map(map)))
}

impl Session {
    /// Opens the output at `opts.data` (a folder or `s3://bucket/prefix`), registering every
    /// table its `_etl/run.json` lists, with exactly the files it lists.
    pub async fn open(opts: SqlOptions, aws: &crate::aws::AwsOptions) -> Result<Session, SqlError> {
        let mut runtime = RuntimeEnvBuilder::new();
        if let Some(limit) = opts.memory_limit {
            runtime = runtime.with_memory_limit(limit, 1.0);
        }
        let runtime = runtime.build_arc()?;
        let mut config = SessionConfig::new().with_information_schema(true).with_target_partitions(target_partitions(
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2),
        ));
        // Which input of a join is built into the hash table: without distinct counts (Parquet
        // has none), each operator's own statistics estimate a join at its smaller input's rows,
        // so `order_item ⋈ product` (2.1M rows) looked smaller than the 808K orders it then
        // joins: the 2.1M rows were built, and, being estimated under 128K rows, collected into
        // one hash table built by one thread. DataFusion's statistics registry estimates a join
        // whose keys have no distinct counts at the product of its inputs (an upper bound), so
        // the join builds on the orders, and only inputs known to be small (the 60K products)
        // are collected whole. `sql/revenue_by_category.sql` on 4M items on 2 cores: 0.83 of
        // the time, then 0.92 of that with the default collection threshold back (it had been
        // set to 0 against the bad estimate); every query of `sql/` gives the same answers
        // (bench/README.md, "SQL").
        config.options_mut().optimizer.use_statistics_registry = true;
        let ctx = match &opts.cluster {
            None => SessionContext::new_with_config_rt(config, runtime),
            Some(url) => {
                let s3 = match &opts.data {
                    Target::Object(_) => Some(crate::store::s3::S3Place::resolve(aws).await),
                    Target::Path(_) => None,
                };
                cluster::remote_context(url, config, runtime, s3.as_ref()).await?
            }
        };
        let remote = opts.cluster.is_some();
        let data = Data::open(&opts.data, aws, &ctx).await?;
        let run = data
            .read_manifest()
            .await
            .map_err(|reason| SqlError::NotAnOutput { path: opts.data.to_string(), reason })?;
        let mut tables = Vec::new();
        if let Some(as_of) = opts.as_of {
            let path = opts.data.to_string();
            if run.delta_history.is_empty() {
                return Err(SqlError::AsOfNotDelta { path });
            }
            let home = data.home();
            let Some(at) = crate::sink::manifest::output_version(&run.delta_history, as_of) else {
                let (first, last) = (&run.delta_history[0], &run.delta_history[run.delta_history.len() - 1]);
                return Err(SqlError::AsOfOutOfRange {
                    path,
                    as_of,
                    first: first.committed_at.clone(),
                    last: last.version,
                    last_at: last.committed_at.clone(),
                });
            };
            // The contracts are the current run's, not the version's: none for a past version.
            for (name, v) in &at.tables {
                tables.push(register_delta(&ctx, &data, &home, name, v.rows, v.version, None, &[], remote).await?);
            }
        } else {
            // The contracts, read once, if a Delta table without a file needs its columns.
            let contracts = if run.tables.iter().any(|t| t.delta_version.is_some() && t.files.is_empty()) {
                crate::sink::manifest::contracts_of(&opts.data, aws, &run)
                    .await
                    .map_err(|e| SqlError::NotAnOutput { path: opts.data.to_string(), reason: e.to_string() })?
            } else {
                Vec::new()
            };
            for t in run.tables {
                if let Some(version) = t.delta_version
                    && data.home().join(&t.name).is_table().await?
                {
                    let listed = match t.files.first() {
                        Some(f) => Some(data.written_schema(&f.path).await?),
                        None => None,
                    };
                    let home = data.home();
                    tables.push(
                        register_delta(&ctx, &data, &home, &t.name, t.rows, version, listed, &contracts, remote)
                            .await?,
                    );
                    continue;
                }
                let urls = t.files.iter().map(|f| data.file_url(&f.path)).collect::<Result<Vec<_>, SqlError>>()?;
                let table = files_table(&ctx, urls.clone()).await?;
                // The schema as written (with etl's field metadata), for `\d`.
                let schema = match t.files.first() {
                    Some(f) => data.written_schema(&f.path).await?,
                    None => table.schema(),
                };
                ctx.register_table(datafusion::common::TableReference::bare(t.name.clone()), table)?;
                let files = urls.iter().map(|u| u.to_string()).collect();
                tables.push(TableInfo { name: t.name, rows: t.rows, files, schema, delta: None });
            }
        }
        let params = parse_params(&opts.params)?;
        Ok(Session { ctx, tables, data_dir: opts.data.to_string(), opts, params })
    }

    pub fn tables(&self) -> &[TableInfo] {
        &self.tables
    }

    /// The output's folder or URL, as given.
    pub fn data_dir(&self) -> &str {
        &self.data_dir
    }

    /// Splits a text of one or more statements.
    pub fn statements(&self, text: &str) -> Result<Vec<DfStatement>, SqlError> {
        let stmts = DFParser::parse_sql(text).map_err(syntax_error)?;
        if stmts.is_empty() {
            return Err(SqlError::Empty);
        }
        Ok(stmts.into_iter().collect())
    }

    /// Plans a statement and, unless writes are allowed, refuses anything that changes files,
    /// tables or settings.
    async fn plan(&self, stmt: DfStatement) -> Result<LogicalPlan, SqlError> {
        let state = self.ctx.state();
        // The tables a query reads (not its CTEs), to say which one is missing when it cannot be
        // planned. Only a query's: in `CREATE TABLE t AS …` or `INSERT INTO t …` the statement's
        // own target is a reference too, and a missing target is not why such a statement fails.
        let query = matches!(&stmt, DfStatement::Statement(s) if matches!(**s, datafusion::sql::sqlparser::ast::Statement::Query(_)));
        let references = if query { state.resolve_table_references(&stmt).unwrap_or_default() } else { Vec::new() };
        let plan = match state.statement_to_plan(stmt).await {
            Ok(plan) => plan,
            Err(e) => {
                let missing = references.iter().find(|r| !self.ctx.table_exist((*r).clone()).unwrap_or(false));
                return Err(match missing {
                    Some(r) => self.unknown_table(&r.to_string()),
                    None => e.into(),
                });
            }
        };
        if !self.opts.allow_write {
            if let Some(kind) = forbidden_kind(&plan) {
                return Err(SqlError::Forbidden { kind });
            }
            let options = SQLOptions::new().with_allow_ddl(false).with_allow_dml(false).with_allow_statements(false);
            options.verify_plan(&plan).map_err(|e| SqlError::Forbidden { kind: e.strip_backtrace() })?;
        }
        Ok(plan)
    }

    /// Checks every statement before any runs, so a refused statement late in a file leaves no
    /// partial effect. (Read-only sessions cannot change the catalog, so planning ahead is exact.)
    pub async fn check_all(&self, stmts: &[DfStatement]) -> Result<(), SqlError> {
        if !self.opts.allow_write {
            for s in stmts {
                self.plan(s.clone()).await?;
            }
        }
        Ok(())
    }

    /// Plans, checks and runs one statement.
    pub async fn run_statement(&self, stmt: DfStatement) -> Result<QueryResult, SqlError> {
        let plan = self.plan(stmt).await?;
        let mut df = self.ctx.execute_logical_plan(plan).await?;
        if let Some(p) = &self.params {
            df = df.with_param_values(p.clone())?;
        }
        let schema = Arc::new(df.schema().as_arrow().clone());
        let collect = df.collect();
        let batches = match self.opts.timeout {
            Some(t) => tokio::time::timeout(t, collect).await.map_err(|_| SqlError::Timeout(t))??,
            None => collect.await?,
        };
        Ok(QueryResult { schema, batches })
    }

    /// Runs every statement of `text`; returns the result of each.
    pub async fn run(&self, text: &str) -> Result<Vec<QueryResult>, SqlError> {
        let mut out = Vec::new();
        let stmts = self.statements(text)?;
        self.check_all(&stmts).await?;
        for stmt in stmts {
            out.push(self.run_statement(stmt).await?);
        }
        Ok(out)
    }

    /// The table called `name`, for `\d TABLE`.
    pub fn table(&self, name: &str) -> Result<&TableInfo, SqlError> {
        self.tables.iter().find(|t| t.name == name).ok_or_else(|| self.unknown_table(name))
    }

    fn unknown_table(&self, name: &str) -> SqlError {
        SqlError::UnknownTable {
            name: name.to_owned(),
            data: self.data_dir.clone(),
            known: self.tables.iter().map(|t| t.name.clone()).collect(),
        }
    }
}

/// A column as `\d TABLE` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnInfo {
    pub name: String,
    /// `list<string>`, `struct<city: string, zip: int64>`, `decimal(38,2)`.
    pub type_name: String,
    pub nullable: bool,
    /// Where the column came from, as the writer recorded it in the field metadata (`S`, `N`,
    /// `S; key=SK ORDER#{ordered_at:epoch_s}#{order_id}`); empty when unknown.
    pub origin: String,
}

impl TableInfo {
    /// The columns as written, with their DynamoDB origin.
    pub fn columns(&self) -> Vec<ColumnInfo> {
        self.schema
            .fields()
            .iter()
            .map(|f| ColumnInfo {
                name: f.name().clone(),
                type_name: short_type(f.data_type()),
                nullable: f.is_nullable(),
                origin: f.metadata().get(crate::schema::META_DYNAMODB_TYPE).cloned().unwrap_or_default(),
            })
            .collect()
    }
}

/// Where an output lives: a local folder or an object-store prefix registered with the session.
enum Data {
    Local(PathBuf),
    Object { url: ObjectUrl, store: Arc<dyn object_store::ObjectStore> },
}

impl Data {
    /// Where the output's Delta tables are.
    fn home(&self) -> crate::sink::delta::Home {
        match self {
            Data::Local(dir) => crate::sink::delta::Home::Dir(dir.clone()),
            Data::Object { url, store } => crate::sink::delta::Home::Object { store: store.clone(), url: url.clone() },
        }
    }

    /// The schema written into a file a Delta table lists (a path or a URL), with its metadata.
    #[allow(deprecated)]
    async fn listed_file_schema(&self, file: &str) -> Result<SchemaRef, SqlError> {
        use datafusion::parquet::arrow::async_reader::{ParquetObjectReader, ParquetRecordBatchStreamBuilder};
        match self {
            Data::Local(_) => local_parquet_schema(file),
            Data::Object { store, .. } => {
                let parsed = url::Url::parse(file).map_err(|e| SqlError::NotAnOutput {
                    path: file.to_owned(),
                    reason: format!("a Delta table lists a file that is not a URL: {e}"),
                })?;
                let key = object_store::path::Path::from_url_path(parsed.path())
                    .map_err(|e| SqlError::NotAnOutput { path: file.to_owned(), reason: e.to_string() })?;
                let reader = ParquetObjectReader::new(store.clone(), key);
                let builder = ParquetRecordBatchStreamBuilder::new(reader).await;
                Ok(builder.map_err(|e| SqlError::DataFusion(e.into()))?.schema().clone())
            }
        }
    }

    async fn open(data: &Target, aws: &crate::aws::AwsOptions, ctx: &SessionContext) -> Result<Data, SqlError> {
        match data {
            Target::Path(p) => Ok(Data::Local(p.clone())),
            Target::Object(url) => {
                let store = store::open(url, aws).await?;
                let base = url::Url::parse(&url.bucket_url())
                    .map_err(|e| SqlError::NotAnOutput { path: url.to_string(), reason: e.to_string() })?;
                ctx.register_object_store(&base, store.clone());
                Ok(Data::Object { url: url.clone(), store })
            }
        }
    }

    /// The committed run manifest, with every listed file checked to stay inside the output.
    async fn read_manifest(&self) -> Result<RunManifest, String> {
        match self {
            Data::Local(dir) => RunManifest::read(dir).map_err(|e| e.to_string()),
            Data::Object { url, store } => {
                use object_store::ObjectStoreExt as _;
                let key = format!("{}{RUN_MANIFEST}", url.dir_prefix());
                let path = object_store::path::Path::from(key.as_str());
                let get = async { store.get(&path).await?.bytes().await };
                let bytes = get.await.map_err(|e| store::error::error_text(&e))?;
                RunManifest::parse(&url.url_of(&key), &bytes).map_err(|e| e.to_string())
            }
        }
    }

    fn file_url(&self, rel: &str) -> Result<ListingTableUrl, SqlError> {
        match self {
            Data::Local(dir) => {
                let f = dir.join(rel);
                let canonical = |p: &std::path::Path| {
                    std::fs::canonicalize(p).map_err(|source| SqlError::Io {
                        action: "open",
                        path: p.display().to_string(),
                        source,
                    })
                };
                let abs = canonical(&f)?;
                // A link inside the output must not lead a table out of it.
                if !abs.starts_with(canonical(dir)?) {
                    return Err(SqlError::NotAnOutput {
                        path: dir.display().to_string(),
                        reason: format!("`{rel}` resolves to `{}`, outside the output", abs.display()),
                    });
                }
                Ok(ListingTableUrl::parse(abs.to_string_lossy())?)
            }
            Data::Object { url, .. } => Ok(ListingTableUrl::parse(url.url_of(&format!("{}{rel}", url.dir_prefix())))?),
        }
    }

    /// The Arrow schema stored in a file's footer, with etl's field metadata.
    // `ParquetObjectReader` is deprecated in parquet 59 in favour of hand-written readers; it
    // still works and reads only the footer, which is all this needs.
    #[allow(deprecated)]
    async fn written_schema(&self, rel: &str) -> Result<SchemaRef, SqlError> {
        use datafusion::parquet::arrow::async_reader::{ParquetObjectReader, ParquetRecordBatchStreamBuilder};
        let parquet = |e: datafusion::parquet::errors::ParquetError| SqlError::DataFusion(e.into());
        match self {
            Data::Local(dir) => parquet_file_schema(&dir.join(rel)),
            Data::Object { url, store } => {
                let key = object_store::path::Path::from(format!("{}{rel}", url.dir_prefix()));
                let reader = ParquetObjectReader::new(store.clone(), key);
                Ok(ParquetRecordBatchStreamBuilder::new(reader).await.map_err(parquet)?.schema().clone())
            }
        }
    }
}

/// A table over exactly these Parquet files, with the schema they were written with.
async fn files_table(
    ctx: &SessionContext,
    urls: Vec<ListingTableUrl>,
) -> Result<Arc<dyn datafusion::datasource::TableProvider>, SqlError> {
    let options = ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
    let config =
        ListingTableConfig::new_with_multi_paths(urls).with_listing_options(options).infer_schema(&ctx.state()).await?;
    Ok(Arc::new(ListingTable::try_new(config)?))
}

/// A Delta table opened at one version.
struct OpenedDelta {
    provider: Arc<dyn datafusion::datasource::TableProvider>,
    /// The URLs of the version's files.
    files: Vec<String>,
    /// The protocol's reader version: 1 means the version's rows are exactly its files' rows.
    reader_version: i32,
    info: DeltaInfo,
}

/// The Delta table at `at`, at `version`, as a DataFusion table, with its files and commit.
async fn delta_provider(
    ctx: &SessionContext,
    at: &crate::sink::delta::Home,
    name: &str,
    version: u64,
) -> Result<OpenedDelta, SqlError> {
    use crate::sink::delta::DeltaError;
    let open = |source: deltalake::DeltaTableError| {
        SqlError::Delta(DeltaError::Open {
            table: name.to_owned(),
            path: at.shown(),
            version,
            source: Box::new(source),
        })
    };
    let table = at.open(Some(version)).await.map_err(open)?;
    table.update_datafusion_session(&ctx.state()).map_err(open)?;
    let files = table.get_file_uris().map_err(open)?.collect();
    let reader_version = table.snapshot().map_err(open)?.protocol().min_reader_version();
    let provider = table.table_provider().await?;
    let (committed_at, operation) = commit_info(at, version).await;
    Ok(OpenedDelta { provider, files, reader_version, info: DeltaInfo { version, committed_at, operation } })
}

/// The time and operation a Delta commit's `commitInfo` records, read from the commit file itself
/// (a checkpointed or cleaned-up commit has none to show).
async fn commit_info(at: &crate::sink::delta::Home, version: u64) -> (Option<String>, Option<String>) {
    let rel = format!("{}/{version:020}.json", crate::sink::delta::DELTA_LOG);
    let Ok(Some(bytes)) = at.read(&rel).await else { return (None, None) };
    let text = String::from_utf8_lossy(&bytes);
    for line in text.lines() {
        let Ok(action) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if let Some(info) = action.get("commitInfo") {
            let at = info
                .get("timestamp")
                .and_then(serde_json::Value::as_i64)
                .and_then(chrono::DateTime::from_timestamp_millis)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
            let op = info.get("operation").and_then(serde_json::Value::as_str).map(str::to_owned);
            return (at, op);
        }
    }
    (None, None)
}

/// The schema written into a local Parquet file (a path, or a `file://` URL, as deltalake lists a
/// local table's files), with its field metadata.
fn local_parquet_schema(file: &str) -> Result<SchemaRef, SqlError> {
    let path = match url::Url::parse(file) {
        Ok(u) if u.scheme() == "file" => u.to_file_path().ok(),
        _ => Some(std::path::PathBuf::from(file)).filter(|p| p.is_absolute()),
    };
    let path = path.ok_or_else(|| SqlError::NotAnOutput {
        path: file.to_owned(),
        reason: "a Delta table lists a file that is not local".into(),
    })?;
    parquet_file_schema(&path)
}

/// The schema written into the local Parquet file at `path`, with its field metadata.
fn parquet_file_schema(path: &std::path::Path) -> Result<SchemaRef, SqlError> {
    use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let file = std::fs::File::open(path).map_err(|source| SqlError::Io {
        action: "open",
        path: path.display().to_string(),
        source,
    })?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| SqlError::DataFusion(e.into()))?;
    Ok(reader.schema().clone())
}

/// The columns of the Delta table `name` when its version has no file (every row deleted), as etl
/// writes them rather than the Delta provider's bare types: `_rejects`'s fixed columns, or those
/// of the table's contract among `contracts` (`_etl/schema/`); `None` when it has none.
fn fileless_columns(name: &str, contracts: &[crate::schema::TableSchema]) -> Option<SchemaRef> {
    if name == crate::normalize::naming::REJECTS_TABLE {
        return Some(crate::normalize::rejects_schema());
    }
    contracts.iter().find(|c| c.table == name).map(|c| Arc::new(c.arrow_schema()))
}

/// Registers the Delta table `name` of the output at `home` at `version` as `name`. Its schema for
/// `\d` is the version's columns with the types and metadata etl wrote ([`delta_written_schema`]),
/// read first from `listed` (the first file the run report lists, when known); a version without
/// a file has [`fileless_columns`] (`contracts` are the output's, for its current versions only).
///
/// For a `remote` (Ballista) session the table is the version's files as a listing table, which
/// Ballista can send to its executors (deltalake's provider it cannot). That is exact only while
/// a version's rows are its files' rows: a table that needs a reader above version 1 (deletion
/// vectors, which `--deletion-vectors` writes, or column mapping) is refused.
#[allow(clippy::too_many_arguments)]
async fn register_delta(
    ctx: &SessionContext,
    data: &Data,
    home: &crate::sink::delta::Home,
    name: &str,
    rows: u64,
    version: u64,
    listed: Option<SchemaRef>,
    contracts: &[crate::schema::TableSchema],
    remote: bool,
) -> Result<TableInfo, SqlError> {
    let opened = delta_provider(ctx, &home.join(name), name, version).await?;
    let delta = datafusion::datasource::TableProvider::schema(opened.provider.as_ref());
    let listed = match listed {
        None if opened.files.is_empty() => fileless_columns(name, contracts),
        listed => listed,
    };
    let schema = delta_written_schema(data, &delta, listed, &opened.files).await?;
    let provider = match (remote, opened.files.is_empty()) {
        (false, _) => opened.provider,
        (true, _) if opened.reader_version > 1 => {
            return Err(SqlError::NotDistributable {
                table: name.to_owned(),
                reason: format!(
                    "it needs a Delta reader of version {} (its files alone are not its rows)",
                    opened.reader_version
                ),
            });
        }
        (true, true) => Arc::new(datafusion::datasource::empty::EmptyTable::new(opened.provider.schema())),
        (true, false) => {
            let urls = opened.files.iter().map(ListingTableUrl::parse).collect::<Result<Vec<_>, _>>()?;
            files_table(ctx, urls).await?
        }
    };
    ctx.register_table(datafusion::common::TableReference::bare(name.to_owned()), provider)?;
    Ok(TableInfo { name: name.to_owned(), rows, files: opened.files, schema, delta: Some(opened.info) })
}

/// How many partitions a query's operators split their work into, on `cores` cores: at least
/// [`MIN_TARGET_PARTITIONS`]. DataFusion's default (one per core) gives a 2-core machine two
/// partitions. While joins were estimated without the statistics registry (see
/// [`Session::open`]), more partitions kept paying on 2 cores: 8 then 16 (the join of
/// `sql/revenue_by_category.sql` 0.81, then 0.93 of that), at the cost of a group-by over the
/// largest table (16 partial hash tables of its 60K groups). With the join planned right, 4 is
/// best there, paired on 4M items against 16: the join 0.93, the group-by 0.88, the nine queries
/// of `sql/` 0.97 in total; 2 gave the join 1.07 and 8 gave 0.98 (bench/README.md, "SQL").
/// Measured on 2 cores only: from 4 cores up, DataFusion's one per core.
fn target_partitions(cores: usize) -> usize {
    cores.max(MIN_TARGET_PARTITIONS)
}

/// The fewest partitions [`target_partitions`] gives.
const MIN_TARGET_PARTITIONS: usize = 4;

/// A Delta table's columns (`delta`, the version's schema, in its order) as etl wrote them: each
/// with the Arrow type and field metadata (its DynamoDB origin) of a file that has it, and the
/// schema's metadata of the first file read. `listed` (the first file the run report lists) is
/// read first; a column a later merge added is missing from files written before it (and from a
/// file a MERGE rewrote), so the version's files are then read, the last listed first, until
/// every column is found. A column no file has keeps the provider's field.
async fn delta_written_schema(
    data: &Data,
    delta: &SchemaRef,
    listed: Option<SchemaRef>,
    files: &[String],
) -> Result<SchemaRef, SqlError> {
    use datafusion::arrow::datatypes::{FieldRef, Schema};
    let mut found: HashMap<String, FieldRef> = HashMap::new();
    let mut metadata = None;
    let mut newest = files.iter().rev();
    let mut next = listed;
    loop {
        let written = match next.take() {
            Some(s) => s,
            None if delta.fields().iter().all(|f| found.contains_key(f.name())) => break,
            None => match newest.next() {
                Some(f) => data.listed_file_schema(f).await?,
                None => break,
            },
        };
        metadata.get_or_insert_with(|| written.metadata().clone());
        for f in written.fields() {
            found.entry(f.name().clone()).or_insert_with(|| f.clone());
        }
    }
    let Some(metadata) = metadata else { return Ok(delta.clone()) };
    let fields: Vec<FieldRef> =
        delta.fields().iter().map(|d| found.get(d.name()).cloned().unwrap_or_else(|| d.clone())).collect();
    Ok(Arc::new(Schema::new_with_metadata(fields, metadata)))
}

/// `list<string>`, `struct<city: string, zip: int64>`, `decimal(38,2)`: types as `\d` shows them.
fn short_type(dt: &datafusion::arrow::datatypes::DataType) -> String {
    use datafusion::arrow::datatypes::DataType as D;
    match dt {
        D::Utf8 | D::Utf8View | D::LargeUtf8 => "string".into(),
        D::Binary | D::BinaryView | D::LargeBinary => "binary".into(),
        D::Boolean => "bool".into(),
        D::Int64 => "int64".into(),
        D::Decimal128(p, s) => format!("decimal({p},{s})"),
        D::List(f) | D::LargeList(f) => format!("list<{}>", short_type(f.data_type())),
        D::Struct(fields) => format!(
            "struct<{}>",
            fields
                .iter()
                .map(|f| format!("{}: {}", f.name(), short_type(f.data_type())))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string().to_lowercase(),
    }
}

/// The kind of a statement that changes something, for the refusal message.
fn forbidden_kind(plan: &LogicalPlan) -> Option<String> {
    match plan {
        LogicalPlan::Ddl(ddl) => Some(format!("DDL (`{}`)", ddl.name())),
        LogicalPlan::Dml(dml) => Some(format!("DML (`{}`)", dml.op)),
        LogicalPlan::Copy(_) => Some("`COPY`".into()),
        LogicalPlan::Statement(s) => Some(format!("the statement `{}`", s.name())),
        LogicalPlan::Explain(e) => forbidden_kind(&e.plan),
        LogicalPlan::Analyze(a) => forbidden_kind(&a.input),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::error::ArrowError;
    use datafusion::error::DataFusionError;

    use super::*;

    #[test]
    fn an_unknown_table_hint_corrects_typos_lists_tables_and_says_when_to_quote() {
        let known = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            unknown_table_hint("orders", &known(&["_rejects", "order", "user"])),
            "did you mean `order`? the tables are `_rejects`, `order`, `user`"
        );
        assert_eq!(unknown_table_hint("invoice", &known(&["order"])), "the tables are `order`");
        assert_eq!(unknown_table_hint("order", &[]), "the output has no tables");
        // SQL read `Order` as `order`: the table is `Order`, quoted.
        assert_eq!(
            unknown_table_hint("order", &known(&["Order", "user"])),
            "did you mean `Order`? the tables are `Order`, `user`; quote a name that is not all lowercase: `\"Order\"`"
        );
        let many: Vec<String> = (0..25).map(|i| format!("t{i:02}")).collect();
        let hint = unknown_table_hint("x", &many);
        assert!(hint.starts_with("the tables are `t00`, `t01`"), "{hint}");
        assert!(hint.ends_with("`t19` and 5 more (`\\d` lists them all)"), "{hint}");
    }

    #[test]
    fn parse_errors_are_the_parsers_message_once() {
        let e = syntax_error(DFParser::parse_sql("SELEC 1").unwrap_err());
        assert_eq!(
            e.to_string(),
            "cannot parse the SQL: Expected: an SQL statement, found: SELEC at Line: 1, Column: 1"
        );
        assert!(std::error::Error::source(&e).is_none());
        let e = syntax_error(DFParser::parse_sql("SELECT 'abc").unwrap_err());
        assert_eq!(e.to_string(), "cannot parse the SQL: Unterminated string literal at Line: 1, Column: 8");
        let nested = format!("SELECT {}1{}", "(".repeat(500), ")".repeat(500));
        let e = syntax_error(DFParser::parse_sql(&nested).unwrap_err());
        assert_eq!(e.to_string(), "cannot parse the SQL: the statement nests deeper than the parser reads");
    }

    #[test]
    fn queries_split_at_least_four_ways_and_once_per_core_beyond() {
        assert_eq!(target_partitions(1), 4);
        assert_eq!(target_partitions(2), 4);
        assert_eq!(target_partitions(4), 4);
        assert_eq!(target_partitions(48), 48);
    }

    #[test]
    fn memory_errors_are_found_by_kind_however_wrapped() {
        let exhausted = || DataFusionError::ResourcesExhausted("Failed to allocate 1024 bytes".into());
        let wrapped = [
            exhausted(),
            DataFusionError::Context("while sorting".into(), Box::new(exhausted())),
            DataFusionError::Shared(Arc::new(exhausted())),
            DataFusionError::External(Box::new(exhausted())),
            DataFusionError::ArrowError(Box::new(ArrowError::ExternalError(Box::new(exhausted()))), None),
        ];
        for e in wrapped {
            let text = e.to_string();
            let e = SqlError::DataFusion(e);
            assert!(e.is_resources_exhausted(), "{text}");
            assert!(e.hint().is_some_and(|h| h.contains("--memory-limit")), "{text}");
        }
        // The words alone do not make a memory error.
        let lookalike = SqlError::DataFusion(DataFusionError::Plan("Resources exhausted: not really".into()));
        assert!(!lookalike.is_resources_exhausted());
        assert!(!SqlError::Timeout(Duration::from_secs(1)).is_resources_exhausted());
    }
}
