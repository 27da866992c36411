//! The peer a user would pick instead of icefloe for `bench_flightsql_scan.py`: a Flight SQL
//! server on Apache DataFusion (`datafusion-flight-sql-server`) that serves the benchmark's
//! Parquet files as table `events`, with plain Utf8 strings (no view types), so its answers have
//! the same Arrow types as icefloe's.
//!
//! Usage: icefloe-datafusion-peer FILE.parquet...   (prints `peer listening on grpc://HOST:PORT`)

use std::io::Write;
use std::sync::Arc;

use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::execution::context::{SessionConfig, SessionContext};
use datafusion_flight_sql_server::service::FlightSqlService;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files: Vec<String> = std::env::args().skip(1).collect();
    if files.is_empty() {
        return Err("usage: icefloe-datafusion-peer FILE.parquet...".into());
    }
    // View types (Utf8View) are DataFusion's default for Parquet strings; icefloe answers Utf8.
    let config = SessionConfig::new().set_bool("datafusion.execution.parquet.schema_force_view_types", false);
    let ctx = SessionContext::new_with_config(config);
    let urls = files.iter().map(ListingTableUrl::parse).collect::<Result<Vec<_>, _>>()?;
    // The format's own options decide for a table registered like this (not the session's).
    let format = ParquetFormat::default().with_force_view_types(false);
    let options = ListingOptions::new(Arc::new(format)).with_file_extension(".parquet");
    let schema = options.infer_schema(&ctx.state(), &urls[0]).await?;
    let table = ListingTable::try_new(
        ListingTableConfig::new_with_multi_paths(urls).with_listing_options(options).with_schema(schema),
    )?;
    ctx.register_table("events", Arc::new(table))?;

    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    println!("peer listening on grpc://{addr}");
    std::io::stdout().flush()?;
    FlightSqlService::new(ctx.state()).serve_with_listener(listener).await
}
