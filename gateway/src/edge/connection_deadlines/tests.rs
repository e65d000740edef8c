use super::*;
use tokio::net::TcpListener;

/// The socket wrapper tells the watchdog about bytes received, and about nothing else: a read that finds no
/// data leaves an idle connection idle, the first byte starts the header clock.
#[tokio::test]
async fn the_socket_reports_bytes_and_only_bytes_to_the_watchdog() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Far apart, so which deadline is in force shows without controlling time.
    let limits = ConnectionLimits {
        header_timeout: Duration::from_secs(1_000),
        idle_timeout: Duration::from_secs(1),
        ..ConnectionLimits::default()
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (server, _) = listener.accept().await.unwrap();
    let activity = Arc::new(Activity::new());
    let mut socket = WatchedIo::new(server, activity.clone());
    let idle = activity.deadline(&limits).unwrap();
    let mut storage = [0u8; 16];
    let nothing = std::future::poll_fn(|cx| {
        let mut buf = ReadBuf::new(&mut storage);
        Poll::Ready(Pin::new(&mut socket).poll_read(cx, &mut buf).is_pending())
    })
    .await;
    assert!(nothing, "no byte was sent yet");
    assert_eq!(
        activity.deadline(&limits),
        Some(idle),
        "a read that found nothing"
    );
    client.write_all(b"P").await.unwrap();
    assert_eq!(socket.read(&mut storage).await.unwrap(), 1);
    let deadline = activity.deadline(&limits).unwrap();
    assert!(
        matches!(deadline, Deadline::Header(at) if at > Instant::now() + Duration::from_secs(900)),
        "the first byte of a head starts the header timeout"
    );
    // Writes pass through (hyper writes vectored; a plain `write` must work too). Without vectored writes
    // hyper would copy every body chunk into its head buffer first.
    assert!(socket.is_write_vectored());
    socket.write_all(b"ok").await.unwrap();
    socket.flush().await.unwrap();
    let mut answer = [0u8; 2];
    client.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"ok");
    // hyper ends a connection it closes with a shutdown: the peer must see the end while the socket is
    // still open here, not only once it is dropped.
    socket.shutdown().await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(10), client.read(&mut answer)).await;
    assert_eq!(
        end.expect("the shutdown reached the peer").unwrap(),
        0,
        "end of stream"
    );
    drop(socket);
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_tells_idle_from_header_time() {
    let limits = ConnectionLimits {
        header_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(7),
        ..ConnectionLimits::default()
    };
    let activity = Arc::new(Activity::new());
    let opened = Instant::now();
    assert_eq!(
        activity.deadline(&limits),
        Some(Deadline::Idle(opened + limits.idle_timeout))
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    activity.received();
    let first_byte = Instant::now();
    assert_eq!(
        activity.deadline(&limits),
        Some(Deadline::Header(first_byte + limits.header_timeout))
    );
    let guard = activity.begin();
    assert_eq!(activity.deadline(&limits), None);
    tokio::time::advance(Duration::from_secs(100)).await;
    activity.received();
    assert_eq!(activity.deadline(&limits), None, "bytes during a request");
    drop(guard);
    let ended = Instant::now();
    assert_eq!(
        activity.deadline(&limits),
        Some(Deadline::Idle(ended + limits.idle_timeout))
    );
}

/// A response the client reads, however slowly, is never cut; one it stopped reading is, after the write
/// timeout, whether its body is still being produced or has been handed over whole.
#[tokio::test(start_paused = true)]
async fn the_watchdog_tells_a_slow_reader_from_one_that_stopped() {
    let limits = ConnectionLimits {
        idle_timeout: Duration::from_secs(7),
        write_timeout: Duration::from_secs(3),
        ..ConnectionLimits::default()
    };
    let activity = Arc::new(Activity::new());
    let guard = activity.begin();
    activity.written(&Poll::Ready(Ok(100)));
    assert_eq!(activity.deadline(&limits), None, "writing and in flight");
    activity.written(&Poll::Pending);
    let blocked = Instant::now();
    let stalled = Some(Deadline::Write(blocked + limits.write_timeout));
    assert_eq!(activity.deadline(&limits), stalled);
    tokio::time::advance(Duration::from_secs(1)).await;
    activity.written(&Poll::Pending);
    assert_eq!(
        activity.deadline(&limits),
        stalled,
        "from the first refusal"
    );
    activity.written(&Poll::Ready(Ok(1)));
    assert_eq!(activity.deadline(&limits), None, "progress ends the wait");
    // The body was handed over whole; its bytes are still going out.
    drop(guard);
    tokio::time::advance(Duration::from_secs(100)).await;
    activity.written(&Poll::Ready(Ok(1)));
    let last_byte = Instant::now();
    assert_eq!(
        activity.deadline(&limits),
        Some(Deadline::Idle(last_byte + limits.idle_timeout)),
        "idle from the last byte written, not from the end of the body"
    );
    activity.written(&Poll::Pending);
    assert_eq!(
        activity.deadline(&limits),
        Some(Deadline::Write(Instant::now() + limits.write_timeout))
    );
    activity.written(&Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())));
    assert_eq!(
        activity.deadline(&limits),
        Some(Deadline::Write(Instant::now() + limits.write_timeout)),
        "a failed write is no progress"
    );
}

/// A hand-over still pending when the third epoch after its own opens (two whole epochs, one write timeout,
/// have passed) is stale; one followed by an ask in time never is, however many epochs a stream lasts.
#[test]
fn a_hand_over_is_stale_two_whole_epochs_on_and_not_before() {
    let hand_overs = HandOvers::default();
    // A stream that is asked again within every epoch, for many epochs (slots are reused many times).
    for _ in 0..40 {
        let slot = hand_overs.handed();
        assert!(!hand_overs.advance());
        hand_overs.asked(slot);
    }
    let slot = hand_overs.handed();
    assert!(!hand_overs.advance(), "less than one whole epoch");
    assert!(!hand_overs.advance(), "one whole epoch");
    assert!(hand_overs.advance(), "two whole epochs");
    hand_overs.asked(slot);
    assert!(!hand_overs.advance());
    // Two streams: one asked again, one not.
    let waiting = hand_overs.handed();
    let reading = hand_overs.handed();
    assert!(!hand_overs.advance());
    hand_overs.asked(reading);
    let reading = hand_overs.handed();
    assert!(!hand_overs.advance());
    hand_overs.asked(reading);
    assert!(hand_overs.advance(), "the stream not asked again");
    hand_overs.asked(waiting);
}

/// Over HTTP/2 the request guard counts hand-overs until the body is asked again or dropped; over HTTP/1 it
/// counts nothing.
#[test]
fn request_guards_count_hand_overs_over_http2_only() {
    use crate::edge::in_flight::BodyGuard;

    let activity = Arc::new(Activity::new());
    let pending = |activity: &Activity| -> usize {
        activity
            .handed_over
            .pending
            .iter()
            .map(|n| n.load(Relaxed))
            .sum()
    };
    let mut http1 = activity.begin();
    assert!(!http1.counts_hand_overs());
    http1.handed_over();
    assert_eq!(pending(&activity), 0);
    drop(http1);
    activity.multiplexed();
    let mut stream = activity.begin();
    assert!(stream.counts_hand_overs());
    stream.handed_over();
    assert_eq!(pending(&activity), 1);
    stream.asked();
    assert_eq!(pending(&activity), 0);
    stream.handed_over();
    drop(stream);
    assert_eq!(pending(&activity), 0, "a body dropped after its last frame");
}

/// Over HTTP/2 frames come and go with no request in flight (pings, settings): they neither start the header
/// clock nor keep the connection from counting as idle. The preface tells the two protocols apart.
#[tokio::test]
async fn over_http2_frames_between_requests_leave_the_connection_idle() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let limits = ConnectionLimits {
        header_timeout: Duration::from_secs(1_000),
        idle_timeout: Duration::from_secs(1),
        ..ConnectionLimits::default()
    };
    for (first, multiplexed) in [(HTTP2_PREFACE, true), (&b"POST / HTTP/1.1\r\n"[..], false)] {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let activity = Arc::new(Activity::new());
        let mut socket = WatchedIo::new(server, activity.clone());
        let idle = activity.deadline(&limits).unwrap();
        client.write_all(first).await.unwrap();
        let mut storage = vec![0u8; first.len()];
        socket.read_exact(&mut storage).await.unwrap();
        socket.write_all(b"settings").await.unwrap();
        let deadline = activity.deadline(&limits).unwrap();
        if multiplexed {
            assert_eq!(
                deadline, idle,
                "the preface, a frame and a reply: still idle"
            );
        } else {
            assert!(matches!(deadline, Deadline::Header(_)), "{deadline:?}");
        }
    }
}
