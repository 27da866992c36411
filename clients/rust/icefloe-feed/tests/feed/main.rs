//! Integration tests of icefloe-feed against a real `icefloe serve` (port 0, a fresh
//! warehouse each). One test binary, so the crate links once.

mod common;

mod auth;
mod changes;
mod commits;
mod expiry;
mod restart;
mod rows;
mod slow;
mod tls;
