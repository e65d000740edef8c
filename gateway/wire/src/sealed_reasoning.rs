//! Reasoning a client carries back for the gateway: a *sealed* reasoning part.
//!
//! Every upstream's reasoning comes with what that upstream needs to continue from it (a [`Continuation`]:
//! Anthropic's signed `thinking`, OpenAI's encrypted reasoning item, Bedrock's `reasoningContent` signature,
//! Gemini's `thoughtSignature`). An inbound format whose clients send reasoning back has one opaque slot for it:
//! Responses' `encrypted_content`, Messages' `thinking` `signature`. When the format's own form does not fit the
//! continuation (anything but OpenAI's in Responses, anything but Anthropic's in Messages), the gateway writes the
//! part there sealed: `tower-chat.reasoning.v1:` followed by the base64 of the part's JSON (its text and its
//! continuation). The text travels with the continuation because providers check one against the other. Clients
//! treat the value as opaque, as they do the providers' own; the gateway restores the part from it when it comes
//! back, so the next round sends the upstream what it issued, on any replica and after a restart: no state is
//! kept between requests.
//!
//! Nothing in a sealed part is secret or signed by the gateway: it holds what the client was shown plus the
//! upstream's own signature, which the upstream verifies.

#[cfg(doc)]
use tower_chat::Continuation;
use tower_chat::{Blob, ReasoningPart};

use crate::error::ApiError;
use crate::format::schema;

/// What every sealed part starts with: the format's name, then its version.
const SEALED_FORMAT: &str = "tower-chat.reasoning.";
/// The version this gateway writes and reads.
const SEALED_VERSION: &str = "v1:";

/// A reasoning part sealed: see the [module docs](self).
pub(crate) fn seal(part: &ReasoningPart) -> String {
    let json = serde_json::to_vec(part).expect("a reasoning part serialises");
    let blob = Blob::new(json, "application/json");
    let mut sealed =
        String::with_capacity(SEALED_FORMAT.len() + SEALED_VERSION.len() + blob.len() * 4 / 3 + 4);
    sealed.push_str(SEALED_FORMAT);
    sealed.push_str(SEALED_VERSION);
    sealed.push_str(blob.base64());
    sealed
}

/// The reasoning part sealed in `value` (the `field` at `at`), or `None` when the value is not one the gateway
/// issued (a provider's own). A value in the gateway's format that does not decode is a 400 naming the place.
pub(crate) fn unseal(
    value: &str,
    at: &str,
    field: &str,
) -> Result<Option<ReasoningPart>, ApiError> {
    let Some(versioned) = value.strip_prefix(SEALED_FORMAT) else {
        return Ok(None);
    };
    let invalid = |why: &str| {
        schema(format!(
            "{at}: `{field}` is not reasoning this server issued ({why}); send reasoning back unchanged"
        ))
    };
    let encoded = versioned
        .strip_prefix(SEALED_VERSION)
        .ok_or_else(|| invalid("an unknown version"))?;
    let blob = Blob::from_base64(encoded, "application/json").map_err(|_| invalid("not base64"))?;
    let part: ReasoningPart =
        serde_json::from_slice(blob.bytes()).map_err(|_| invalid("not a reasoning part"))?;
    Ok(Some(part))
}
