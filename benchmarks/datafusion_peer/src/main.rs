//! The peer a user would pick instead of icefloe for the benchmarks: a Flight SQL server on
//! Apache DataFusion (`datafusion-flight-sql-server`) over the benchmark's Parquet files, with
//! plain Utf8 strings (no view types), so its answers have the same Arrow types as icefloe's.
//!
//! Usage: icefloe-datafusion-peer FILE.parquet...      (one table, `events`: bench_flightsql_scan)
//!        icefloe-datafusion-peer NAME=PATH...         (a table per argument; PATH a file or a
//!                                                      folder of Parquet files: bench_tpch)
//! It prints `peer listening on grpc://HOST:PORT` when ready.

use std::io::Write;
use std::sync::Arc;

use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::execution::context::{SessionConfig, SessionContext};
use datafusion_flight_sql_server::service::FlightSqlService;

async fn register(ctx: &SessionContext, name: &str, paths: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let urls = paths.iter().map(ListingTableUrl::parse).collect::<Result<Vec<_>, _>>()?;
    // The format's own options decide for a table registered like this (not the session's).
    let format = ParquetFormat::default().with_force_view_types(false);
    let options = ListingOptions::new(Arc::new(format)).with_file_extension(".parquet");
    let schema = options.infer_schema(&ctx.state(), &urls[0]).await?;
    let table = ListingTable::try_new(
        ListingTableConfig::new_with_multi_paths(urls).with_listing_options(options).with_schema(schema),
    )?;
    ctx.register_table(name, Arc::new(table))?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        return Err("usage: icefloe-datafusion-peer FILE.parquet... | NAME=PATH...".into());
    }
    // View types (Utf8View) are DataFusion's default for Parquet strings; icefloe answers Utf8.
    let config = SessionConfig::new().set_bool("datafusion.execution.parquet.schema_force_view_types", false);
    let ctx = SessionContext::new_with_config(config);
    if args.iter().all(|a| a.contains('=')) {
        for arg in &args {
            let (name, path) = arg.split_once('=').expect("checked above");
            let path = if std::path::Path::new(path).is_dir() { format!("{}/", path.trim_end_matches('/')) } else { path.to_string() };
            register(&ctx, name, &[path]).await?;
        }
    } else {
        register(&ctx, "events", &args).await?;
    }

    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    println!("peer listening on grpc://{addr}");
    std::io::stdout().flush()?;
    FlightSqlService::new(ctx.state()).serve_with_listener(listener).await
}
