//! The real tiny local model for the smoke test and the structured-output benchmark: the llama.cpp
//! server `ops/bin/llm` installs, started with its model on a free loopback port and polled until
//! it is healthy, so both drive the same server the same way.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long the server may take to load the model and answer `/health`.
const HEALTHY_WITHIN: Duration = Duration::from_secs(90);

/// A running local model server; killed when dropped.
#[derive(Debug)]
pub struct LocalModel {
    child: tokio::process::Child,
    port: u16,
}

impl LocalModel {
    /// Installs the model if needed (`ops/bin/llm paths` under `repo_root`), starts the server
    /// with one thread and a context of `context` tokens, and waits until it answers `/health`.
    /// Panics when it cannot: it is test infrastructure, with nothing better to do.
    pub async fn start(repo_root: &Path, context: u32) -> LocalModel {
        let llm = repo_root.join("ops/bin/llm");
        let out = tokio::process::Command::new(&llm)
            .arg("paths")
            .stderr(Stdio::inherit())
            .output()
            .await
            .unwrap_or_else(|e| panic!("run {}: {e}", llm.display()));
        assert!(
            out.status.success(),
            "ops/bin/llm paths failed: install the local model with `ops/bin/llm install`"
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut lines = text.lines();
        let (Some(server), Some(model)) = (lines.next(), lines.next()) else {
            panic!("ops/bin/llm paths printed no server and model: {text:?}");
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("no free loopback port: {e}"));
        let mut child = tokio::process::Command::new(server)
            .args([
                "-m",
                model,
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
            ])
            .args(["-t", "1", "-c", &context.to_string(), "--no-webui"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start the local model server {server}: {e}"));
        let deadline = tokio::time::Instant::now() + HEALTHY_WITHIN;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the local model server exited with {status} before becoming healthy");
            }
            if healthy(port).await {
                return LocalModel { child, port };
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the local model server did not become healthy within {HEALTHY_WITHIN:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `http://127.0.0.1:PORT`, as a provider's base URL.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Stops the server and waits for it.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Whether `GET /health` answers 200 within two seconds.
async fn healthy(port: u16) -> bool {
    let probe = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .ok()?;
        let mut head = [0u8; 12];
        s.read_exact(&mut head).await.ok()?;
        Some(head.ends_with(b"200"))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), probe).await,
        Ok(Some(true))
    )
}
