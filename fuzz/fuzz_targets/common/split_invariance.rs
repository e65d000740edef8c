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
                        Ok(event) => out.push(format!("{event:?}")),
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
