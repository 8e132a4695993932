//! A TCP relay in front of a real server: it passes every byte through unchanged and
//! records, per connection it accepted, the first bytes the client sent. Tests use it
//! to see how Gantry connects to an HTTP backend (how many connections, which HTTP
//! version), which no backend reports.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt as _;
use tokio::io::AsyncWriteExt as _;

/// The HTTP/2 connection preface (RFC 9113 §3.4).
pub const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub struct Relay {
    pub addr: SocketAddr,
    /// The opening bytes (up to 24) of each accepted connection, in order.
    openings: Arc<Mutex<Vec<Vec<u8>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    /// Relays 127.0.0.1:<ephemeral> to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let openings: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let seen = openings.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let seen = seen.clone();
                let slot = {
                    let mut s = seen.lock().unwrap();
                    s.push(Vec::new());
                    s.len() - 1
                };
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    // The opening bytes, read within a bound, then passed on.
                    let mut first = vec![0u8; H2_PREFACE.len()];
                    let mut got = 0;
                    while got < first.len() {
                        match tokio::time::timeout(
                            Duration::from_secs(5),
                            client.read(&mut first[got..]),
                        )
                        .await
                        {
                            Ok(Ok(n)) if n > 0 => got += n,
                            _ => break,
                        }
                    }
                    first.truncate(got);
                    seen.lock().unwrap()[slot] = first.clone();
                    if server.write_all(&first).await.is_err() {
                        return;
                    }
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
            }
        });
        Self {
            addr,
            openings,
            task,
        }
    }

    /// The opening bytes of every connection accepted so far.
    pub fn openings(&self) -> Vec<Vec<u8>> {
        self.openings.lock().unwrap().clone()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.openings.lock().unwrap().len()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}
