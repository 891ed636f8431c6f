//! `baton decode` and `baton encode`: rebalance metadata blobs to JSON and back.

use std::io::{Read, Write};
use std::path::PathBuf;

use base64::Engine;
use baton_protocol::{AssignmentInfo, SubscriptionInfo};
use clap::{Args, ValueEnum};

use crate::Failure;

#[derive(Clone, Copy, ValueEnum)]
pub enum Kind {
    Subscription,
    Assignment,
}

#[derive(Args)]
pub struct BlobArgs {
    /// Which metadata the blob holds.
    #[arg(value_enum)]
    kind: Kind,
    /// The blob is (or is written as) hexadecimal text.
    #[arg(long, conflicts_with = "base64")]
    hex: bool,
    /// The blob is (or is written as) base64 text.
    #[arg(long)]
    base64: bool,
    /// Input file, or `-` for standard input.
    #[arg(default_value = "-")]
    input: PathBuf,
}

fn read_all(path: &PathBuf) -> Result<Vec<u8>, Failure> {
    let mut buf = Vec::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| Failure::bad_input(format!("reading standard input: {e}")))?;
    } else {
        buf = std::fs::read(path)
            .map_err(|e| Failure::bad_input(format!("reading {}: {e}", path.display())))?;
    }
    Ok(buf)
}

pub fn decode(args: BlobArgs) -> Result<(), Failure> {
    let raw = read_all(&args.input)?;
    let bytes = if args.hex {
        let text: String = String::from_utf8_lossy(&raw).split_whitespace().collect();
        hex::decode(text).map_err(|e| Failure::bad_input(format!("input is not hex: {e}")))?
    } else if args.base64 {
        let text: String = String::from_utf8_lossy(&raw).split_whitespace().collect();
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| Failure::bad_input(format!("input is not base64: {e}")))?
    } else {
        raw
    };
    let json = match args.kind {
        Kind::Subscription => {
            SubscriptionInfo::decode(&bytes).map(|s| serde_json::to_string_pretty(&s))
        }
        Kind::Assignment => {
            AssignmentInfo::decode(&bytes).map(|a| serde_json::to_string_pretty(&a))
        }
    }
    .map_err(|e| Failure::bad_input(e.to_string()))?
    .expect("metadata always serializes");
    crate::emit(&format!("{json}\n"))?;
    Ok(())
}

pub fn encode(args: BlobArgs) -> Result<(), Failure> {
    let text = String::from_utf8(read_all(&args.input)?)
        .map_err(|_| Failure::bad_input("input is not UTF-8 JSON"))?;
    let bad = |e: serde_json::Error| Failure::bad_input(format!("input JSON: {e}"));
    let bytes = match args.kind {
        Kind::Subscription => serde_json::from_str::<SubscriptionInfo>(&text)
            .map_err(bad)?
            .encode(),
        Kind::Assignment => serde_json::from_str::<AssignmentInfo>(&text)
            .map_err(bad)?
            .encode(),
    }
    .map_err(|e| Failure::bad_input(e.to_string()))?;
    let mut out = std::io::stdout().lock();
    let written = if args.hex {
        writeln!(out, "{}", hex::encode(&bytes))
    } else if args.base64 {
        writeln!(
            out,
            "{}",
            base64::engine::general_purpose::STANDARD.encode(&bytes)
        )
    } else {
        out.write_all(&bytes)
    };
    let written = match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    };
    written.map_err(|e| Failure {
        message: format!("writing output: {e}"),
        status: 1,
    })
}
