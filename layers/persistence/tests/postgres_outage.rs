//! A PostgreSQL server that goes away (connections cut, new ones refused) while the layer is running: calls fail
//! with a typed store error (fail-closed) or are counted (fail-open), and recording resumes when it is back.
//!
//! The outage is real at the TCP level: the store connects through a local proxy that the test shuts down.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tower::{Layer, ServiceExt};
use tower_chat::{ChatRequest, ChatStreamExt, ConversationId, ErrorKind, Message};
use tower_chat_persistence::store::postgres::tokio_postgres;
use tower_chat_persistence::{PersistenceLayer, PostgresStore, Store};
use tower_chat_testkit::{database_url, drain, finish, scripted_stream, text, within, Delivery};

/// Forwards TCP connections to the database until shut down.
struct Proxy {
    tasks: JoinSet<()>,
}

impl Proxy {
    async fn start(listen: SocketAddr, upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind(listen).await.unwrap();
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                let (mut client, _) = listener.accept().await.unwrap();
                connections.spawn(async move {
                    let mut server = TcpStream::connect(upstream).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
            }
        });
        Proxy { tasks }
    }

    /// Cut every connection and stop listening: the database is gone.
    async fn shutdown(mut self) {
        self.tasks.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_fails_calls_with_a_store_error_and_recording_resumes() {
    let Some(url) = database_url() else {
        return;
    };
    let config: tokio_postgres::Config = url.parse().unwrap();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let upstream: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let user = config.get_user().unwrap_or("postgres");
    let dbname = config.get_dbname().unwrap_or(user);

    // Pick a free port for the proxy.
    let listen = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = Proxy::start(listen, upstream).await;
    let schema = format!("tcpersist_{}", common::uuid_simple());
    let store = PostgresStore::builder(format!("postgres://{user}@{listen}/{dbname}"))
        .schema(schema.clone())
        .connect_timeout(Duration::from_millis(500))
        .pool_size(4)
        .connect()
        .await
        .unwrap();
    let closed = PersistenceLayer::new(store.clone());
    let open = PersistenceLayer::new(store.clone()).fail_open();
    let model = common::scripted(|_| scripted_stream(Delivery::OneByOne, common::answer("fine")));
    let request = |conversation: &str| {
        ChatRequest::new(vec![Message::user("q")]).with_extension(ConversationId::new(conversation))
    };

    // Up: recorded.
    let response = closed
        .layer(model.clone())
        .oneshot(request("up"))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(response.text(), "fine");

    proxy.shutdown().await;

    // Down, fail-closed: the output streams, then a typed store error instead of Finish; the call ends rather
    // than waiting for the database to come back.
    let stream = closed
        .layer(model.clone())
        .oneshot(request("down"))
        .await
        .unwrap();
    let (events, error) = within("the store error", drain(stream)).await;
    let error = error.expect("the call ends with an error");
    assert_eq!(error.kind(), &ErrorKind::Store, "{error}");
    assert_eq!(text(&events), "fine");
    assert_eq!(finish(&events), None);
    assert_eq!(closed.stats().failed, 1);

    // Down, fail-open: the call succeeds, the lost record is counted.
    let response = open
        .layer(model.clone())
        .oneshot(request("down-open"))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(response.text(), "fine");
    open.flush().await.unwrap();
    assert_eq!(open.stats().failed, 1);

    // Back up on the same address: the pool reconnects and recording resumes.
    let proxy = Proxy::start(listen, upstream).await;
    let response = closed
        .layer(model.clone())
        .oneshot(request("again"))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(response.text(), "fine");
    for (conversation, expected) in [("up", 1), ("down", 0), ("down-open", 0), ("again", 1)] {
        let calls = store
            .conversation_calls(&ConversationId::new(conversation))
            .await
            .unwrap();
        assert_eq!(calls.len(), expected, "{conversation}");
    }
    store
        .client()
        .await
        .unwrap()
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
    proxy.shutdown().await;
}
