//! A private `redis-server` for the suites that kill and restart one (never the shared Redis).

use std::process::{Child, Command, Stdio};

use super::wait::eventually;

/// A `redis-server` of our own on `port`, killed on drop.
pub(crate) struct PrivateRedis {
    child: Child,
    _dir: tempfile::TempDir,
}

impl PrivateRedis {
    pub(crate) async fn start(port: u16) -> PrivateRedis {
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        let url = format!("redis://127.0.0.1:{port}");
        eventually("the private redis-server to answer", || async {
            let Ok(client) = redis::Client::open(url.as_str()) else {
                return false;
            };
            let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
                return false;
            };
            redis::cmd("PING")
                .query_async::<String>(&mut conn)
                .await
                .is_ok()
        })
        .await;
        PrivateRedis { child, _dir: dir }
    }

    pub(crate) fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nobody listens on now.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
