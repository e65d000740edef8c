//! The harness shared by the provider stream decoders' targets: a decoder never panics, and what it yields does
//! not depend on where the body is split. The decoders share an API but no trait, hence a macro over the type.

/// A fuzz target for `$decoder` (`new`, `feed`, `finish`, `next_event`): the first input byte picks the split.
macro_rules! split_invariance_target {
    ($decoder:ty) => {
        /// Every event (as text), or the error's kind; stops at the first error (the decoder's contract ends
        /// there).
        fn decode(chunks: &[&[u8]]) -> Vec<String> {
            let mut decoder = <$decoder>::new();
            let mut out = Vec::new();
            let drain = |decoder: &mut $decoder, out: &mut Vec<String>| -> bool {
                while let Some(item) = decoder.next_event() {
                    match item {
                        Ok(event) => out.push(blank_drawn_ids(format!("{event:?}"))),
                        Err(error) => {
                            out.push(format!("error {:?}", error.kind()));
                            return false;
                        }
                    }
                }
                true
            };
            for chunk in chunks {
                decoder.feed(chunk);
                if !drain(&mut decoder, &mut out) {
                    return out;
                }
            }
            decoder.finish();
            drain(&mut decoder, &mut out);
            out
        }

        /// A call id a decoder draws for an answer that names none (`call_<16 hex digits>_<n>`, so that two
        /// answers never share ids) differs between two decodings of one body by design: compared blanked.
        fn blank_drawn_ids(text: String) -> String {
            let mut out = String::with_capacity(text.len());
            let mut rest = text.as_str();
            while let Some(at) = rest.find("call_") {
                out.push_str(&rest[..at + 5]);
                rest = &rest[at + 5..];
                let bytes = rest.as_bytes();
                if bytes.len() > 16
                    && bytes[..16].iter().all(u8::is_ascii_hexdigit)
                    && bytes[16] == b'_'
                {
                    out.push_str("<drawn>");
                    rest = &rest[16..];
                }
            }
            out.push_str(rest);
            out
        }

        libfuzzer_sys::fuzz_target!(|data: &[u8]| {
            let Some((&split, body)) = data.split_first() else {
                return;
            };
            let whole = decode(&[body]);
            let at = usize::from(split) % (body.len() + 1);
            let (a, b) = body.split_at(at);
            assert_eq!(whole, decode(&[a, b]), "split at {at}");
        });
    };
}
