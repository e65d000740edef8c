//! Server-sent events written straight into a byte buffer: each format's stream is made of these.

use serde::Serialize;

/// `data: {json}\n\n`, the JSON written straight into `out` (no intermediate `String`).
pub(crate) fn sse_data<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
    begin_sse_data(out);
    write_json(value, out);
    end_sse(out);
}

/// `data: `: the start of an event whose payload the caller writes (encoders that keep an event's fixed head
/// escaped once start it with this), ended by [`end_sse`].
pub(crate) fn begin_sse_data(out: &mut Vec<u8>) {
    out.extend_from_slice(b"data: ");
}

/// `event: {name}\ndata: `: as [`begin_sse_data`], for a named event.
pub(crate) fn begin_sse_event(name: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\n");
    begin_sse_data(out);
}

/// The blank line that ends an event.
pub(crate) fn end_sse(out: &mut Vec<u8>) {
    out.extend_from_slice(b"\n\n");
}

/// `value` as JSON, appended to `out`.
pub(crate) fn write_json<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
    serde_json::to_writer(out, value).expect("serialising into a Vec cannot fail");
}

/// `event: {name}\ndata: {json}\n\n` (Anthropic's and the Responses API's framing).
pub(crate) fn sse_event<T: Serialize + ?Sized>(name: &str, value: &T, out: &mut Vec<u8>) {
    begin_sse_event(name, out);
    write_json(value, out);
    end_sse(out);
}
