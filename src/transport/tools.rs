//! Tool definitions serialised once per tools list, not once per request.

use std::fmt;
use std::sync::{Arc, Mutex, TryLockError};

use serde::Serialize;
use serde_json::value::RawValue;

use crate::request::{Shared, ToolSpec};

/// The JSON of the last tools list a provider encoded. A stack that offers the same tools on every call (a
/// gateway's server tools, an agent's toolbox: one `Shared` list cloned into each request) serialises their JSON
/// Schemas once instead of on every request (~5 k instructions of a gateway request with three tools).
///
/// Keyed by the list's identity ([`Shared::ptr_eq`]), never by comparing contents. The cache holds a handle to
/// the list it encoded, so that list stays allocated (its address cannot be reused by another list) and shared
/// (a request that changes its tools through `DerefMut` changes a copy, which is a new list): a hit is always
/// the JSON of exactly these tools.
#[derive(Default)]
pub(crate) struct ToolsJson {
    last: Mutex<Option<Encoded>>,
}

/// A tools list and its JSON.
type Encoded = (Shared<Vec<ToolSpec>>, Arc<RawValue>);

impl ToolsJson {
    /// `tools` as a JSON array of `wire(tool)`; `None` when there are none.
    pub(crate) fn get<'t, W: Serialize>(
        &self,
        tools: &'t Shared<Vec<ToolSpec>>,
        wire: impl Fn(&'t ToolSpec) -> W,
    ) -> serde_json::Result<Option<Arc<RawValue>>> {
        if tools.is_empty() {
            return Ok(None);
        }
        // A request never waits for another one's encoding: while the cache is busy, it encodes its own.
        let mut last = match self.last.try_lock() {
            Ok(last) => Some(last),
            Err(TryLockError::WouldBlock) => None,
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        };
        if let Some((cached, json)) = last.as_deref().and_then(Option::as_ref) {
            if Shared::ptr_eq(cached, tools) {
                return Ok(Some(json.clone()));
            }
        }
        let wire: Vec<W> = tools.iter().map(wire).collect();
        let json: Arc<RawValue> = serde_json::value::to_raw_value(&wire)?.into();
        if let Some(last) = &mut last {
            **last = Some((tools.clone(), json.clone()));
        }
        Ok(Some(json))
    }
}

impl fmt::Debug for ToolsJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolsJson").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn name(tool: &ToolSpec) -> &str {
        &tool.name
    }

    fn tools(names: &[&str]) -> Shared<Vec<ToolSpec>> {
        Shared::new(
            names
                .iter()
                .map(|n| ToolSpec::new(*n, "", json!({"type": "object"})))
                .collect(),
        )
    }

    #[test]
    fn the_same_list_is_encoded_once_and_another_list_anew() {
        let cache = ToolsJson::default();
        let list = tools(&["a", "b"]);
        let first = cache.get(&list, name).unwrap().unwrap();
        assert_eq!(first.get(), r#"["a","b"]"#);
        let again = cache.get(&list.clone(), name).unwrap().unwrap();
        assert!(Arc::ptr_eq(&first, &again), "a clone of the list hits");
        // Equal contents in another list: encoded again (identity, not contents, is the key).
        let other = tools(&["a", "b"]);
        let fresh = cache.get(&other, name).unwrap().unwrap();
        assert!(!Arc::ptr_eq(&first, &fresh));
        assert!(cache.get(&Shared::default(), name).unwrap().is_none());
    }

    #[test]
    fn a_list_changed_after_it_was_encoded_is_encoded_again() {
        let cache = ToolsJson::default();
        let mut list = tools(&["a"]);
        assert_eq!(cache.get(&list, name).unwrap().unwrap().get(), r#"["a"]"#);
        // The cache's handle keeps the list shared, so this changes a copy: a list the cache never saw.
        list.push(ToolSpec::new("b", "", json!({})));
        assert_eq!(
            cache.get(&list, name).unwrap().unwrap().get(),
            r#"["a","b"]"#
        );
    }
}
