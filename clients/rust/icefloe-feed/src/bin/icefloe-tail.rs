//! `icefloe-tail`: follow an icefloe server's commit feed and print one JSON line per event
//! (the event schema's field names, like `icefloe subscribe`). It keeps following across
//! server restarts and resumes after the last event it printed.

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::Duration;

use futures::StreamExt;
use icefloe_feed::{Client, ClientOptions, Cursor, Subscription};

const USAGE: &str = "\
usage: icefloe-tail [--uri URI] [--after earliest|latest|N] [--table GLOB]... [--heartbeat-ms MS]
                    [--token T | --user NAME] [--tls-root-certs PEM]
                    [--tls-client-cert PEM --tls-client-key PEM]

  --uri             server, grpc://HOST:PORT or grpc+tls://HOST:PORT (env ICEFLOE_URI;
                    default grpc://127.0.0.1:31337)
  --after           start after this seq, or earliest / latest (default latest)
  --table           only these tables: ns.t or a glob such as ns.* (repeatable)
  --token           bearer token for a server with --users (env ICEFLOE_TOKEN)
  --user            log in as NAME; the password is read from the first line of stdin
  --tls-root-certs  PEM file of the CA that signed the server's certificate
  --tls-client-cert, --tls-client-key  client certificate and key (mutual TLS)";

struct Args {
    uri: String,
    subscription: Subscription,
    options: ClientOptions,
}

fn parse(mut argv: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut uri = std::env::var("ICEFLOE_URI").unwrap_or_else(|_| "grpc://127.0.0.1:31337".into());
    let mut subscription = Subscription::default();
    let mut options = ClientOptions::default();
    let mut token = std::env::var("ICEFLOE_TOKEN").ok().filter(|t| !t.is_empty());
    let mut user = None;
    let (mut client_cert, mut client_key) = (None, None);
    while let Some(flag) = argv.next() {
        if flag == "-h" || flag == "--help" {
            return Err(String::new());
        }
        let mut value = || argv.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--uri" => uri = value()?,
            "--after" => subscription.after = value()?.parse::<Cursor>().map_err(|e| format!("--after: {e}"))?,
            "--table" => subscription.tables.push(value()?),
            "--heartbeat-ms" => {
                let ms = value()?
                    .parse::<u64>()
                    .map_err(|_| "--heartbeat-ms takes milliseconds".to_string())?;
                subscription.heartbeat = Duration::from_millis(ms);
            }
            "--token" => token = Some(value()?),
            "--user" => user = Some(value()?),
            "--tls-root-certs" => options.tls.root_certs_pem = Some(read(&value()?)?),
            "--tls-client-cert" => client_cert = Some(read(&value()?)?),
            "--tls-client-key" => client_key = Some(read(&value()?)?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    match (client_cert, client_key) {
        (Some(cert), Some(key)) => options.tls.client_identity_pem = Some((cert, key)),
        (None, None) => {}
        _ => return Err("--tls-client-cert and --tls-client-key go together".into()),
    }
    if let Some(user) = user {
        let mut password = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut password)
            .map_err(|e| format!("reading the password: {e}"))?;
        options = options.with_basic(user, password.trim_end_matches(['\r', '\n']));
    } else if let Some(token) = token {
        options = options.with_token(token);
    }
    Ok(Args {
        uri,
        subscription,
        options,
    })
}

fn read(path: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))
}

async fn tail(args: Args) -> Result<(), String> {
    let client = Client::connect(&args.uri, args.options)
        .await
        .map_err(|e| format!("{}: {e}", args.uri))?;
    let mut events = client.subscribe(args.subscription).await.map_err(|e| e.to_string())?;
    let stdout = std::io::stdout();
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| e.to_string())?;
        let line = serde_json::to_string(&event).map_err(|e| e.to_string())?;
        let mut out = stdout.lock();
        // A closed pipe (`icefloe-tail | head`) is a normal way to stop.
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            return Ok(());
        }
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) if message.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("icefloe-tail: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    tokio::select! {
        result = tail(args) => match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => {
                eprintln!("icefloe-tail: {message}");
                ExitCode::FAILURE
            }
        },
        _ = tokio::signal::ctrl_c() => ExitCode::SUCCESS,
    }
}
