//! A gateway started as its own process (the `tower-chat-gateway` binary), for what needs several processes
//! sharing a database: the process group is killed when the value is dropped, the test failing or not.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

pub struct GatewayProcess {
    child: tower_chat_testkit::ProcessGroup,
    pub addr: SocketAddr,
    log: std::path::PathBuf,
}

impl GatewayProcess {
    /// Start the binary with `args` (besides `--listen`, which it is given), logging to `dir/<label>.log`, and
    /// wait until its `/healthz` answers.
    pub async fn start(dir: &std::path::Path, label: &str, args: &[String]) -> GatewayProcess {
        // A port of its own: bound by the OS, released, handed to the gateway (a process that loses it to
        // another program exits, and `ready` reports that with its log).
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let log = dir.join(format!("{label}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = tower_chat_testkit::ProcessGroup::spawn(
            Command::new(env!("CARGO_BIN_EXE_tower-chat-gateway"))
                .arg("--listen")
                .arg(addr.to_string())
                .args(args)
                .env("RUST_LOG", "warn")
                .stdout(Stdio::from(file.try_clone().unwrap()))
                .stderr(Stdio::from(file)),
        )
        .expect("the tower-chat-gateway binary starts");
        let mut process = GatewayProcess { child, addr, log };
        process.ready().await;
        process
    }

    /// Poll `/healthz` until it answers 200; fail at once if the process exits, and after a minute.
    async fn ready(&mut self) {
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the gateway exited ({status}): {}", self.log());
            }
            let request = Request::get(self.url("/healthz"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            if let Ok(response) = client.request(request).await {
                if response.status() == 200 {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no /healthz after 60 s: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
