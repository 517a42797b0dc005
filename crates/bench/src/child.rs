//! Child processes under test: killed (SIGKILL) when dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

pub struct ChildGuard {
    pub child: Child,
    pub what: String,
}

impl ChildGuard {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// kill -9 and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Fail when the process has already exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("{} exited early: {status}", self.what);
        }
        Ok(())
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Read stdout until a line holds an `http://` URL; keep draining it afterwards so the child
/// never blocks on a full pipe. Returns the URL without a trailing slash.
pub fn wait_for_url(guard: &mut ChildGuard, stdout: ChildStdout, timeout: Duration) -> Result<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let url = if sent { None } else { line.split_whitespace().find(|w| w.starts_with("http://")) };
            if let Some(url) = url {
                let _ = tx.send(url.trim_end_matches('/').to_string());
                sent = true;
            }
        }
    });
    let deadline = Instant::now() + timeout;
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(url) => return Ok(url),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                guard.check_alive()?;
                if Instant::now() > deadline {
                    bail!("{} printed no URL within {timeout:?}", guard.what);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                guard.check_alive()?;
                bail!("{} closed stdout without printing its URL", guard.what);
            }
        }
    }
}

/// Poll `url` until it answers 200.
pub async fn wait_http_ok(
    client: &reqwest::Client,
    guard: &mut ChildGuard,
    url: &str,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let answer = client.get(url).timeout(Duration::from_secs(2)).send().await;
        if answer.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        guard.check_alive().with_context(|| format!("waiting for {url}"))?;
        if Instant::now() > deadline {
            bail!("{url} not ready within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("bind 127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}
