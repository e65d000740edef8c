//! Fields of a Chat Completions answer no layer models (`annotations` on a message, a provider's extras on a
//! choice): read as they come, skipping only `null`s, and handed on as one
//! [`ProviderExtra::Fields`] event for a Chat Completions client.

use std::collections::VecDeque;

use serde::de::{IgnoredAny, MapAccess};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::event::ChatEvent;
use crate::provider_extra::ProviderExtra;

/// Fields of an object kept as sent; boxed, as most answers have none and the struct holding it moves per chunk.
pub(super) type Extra = Option<Box<Map<String, Value>>>;

/// Read `key`'s value into `extra`, unless it is `null` (OpenAI sends `"logprobs": null` on every choice).
pub(super) fn keep<'de, A: MapAccess<'de>>(
    key: &str,
    map: &mut A,
    extra: &mut Extra,
) -> Result<(), A::Error> {
    let value: Value = map.next_value()?;
    if !value.is_null() {
        extra
            .get_or_insert_with(Box::default)
            .insert(key.to_owned(), value);
    }
    Ok(())
}

/// The event for a message's and a choice's extra fields, if either has any.
pub(super) fn push(message: Extra, choice: Extra, out: &mut VecDeque<ChatEvent>) {
    if message.is_none() && choice.is_none() {
        return;
    }
    out.push_back(ChatEvent::ProviderExtra {
        format: crate::ApiFormat::ChatCompletions,
        extra: ProviderExtra::Fields {
            message: message.map(|m| *m).unwrap_or_default(),
            choice: choice.map(|c| *c).unwrap_or_default(),
        },
    });
}

/// The extra fields of a whole completion's first choice, read in a second pass over the body that skips
/// everything else unread (a whole answer is rarer than a streamed one; its typed read stays as it is).
#[derive(Deserialize)]
pub(super) struct CompletionExtras {
    #[serde(default)]
    choices: Vec<ChoiceExtras>,
}

impl CompletionExtras {
    /// The message's and the choice's extra fields of choice 0.
    pub(super) fn of_first(self) -> (Extra, Extra) {
        self.choices
            .into_iter()
            .find(|c| c.index == 0)
            .map_or((None, None), |c| (c.message, c.choice))
    }
}

struct ChoiceExtras {
    index: u32,
    message: Extra,
    choice: Extra,
}

/// The message fields the decoder reads (and `role`, always `assistant`).
const MESSAGE_FIELDS: &[&str] = &[
    "role",
    "content",
    "reasoning_content",
    "reasoning",
    "refusal",
    "tool_calls",
];

impl<'de> Deserialize<'de> for ChoiceExtras {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = ChoiceExtras;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a choice object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ChoiceExtras, A::Error> {
                let mut choice = ChoiceExtras {
                    index: 0,
                    message: None,
                    choice: None,
                };
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "index" => choice.index = map.next_value()?,
                        "finish_reason" => {
                            map.next_value::<IgnoredAny>()?;
                        }
                        "message" => choice.message = map.next_value::<MessageExtras>()?.0,
                        other => keep(other, &mut map, &mut choice.choice)?,
                    }
                }
                Ok(choice)
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

struct MessageExtras(Extra);

impl<'de> Deserialize<'de> for MessageExtras {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = MessageExtras;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a message object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MessageExtras, A::Error> {
                let mut extra = None;
                while let Some(key) = map.next_key::<String>()? {
                    if MESSAGE_FIELDS.contains(&key.as_str()) {
                        map.next_value::<IgnoredAny>()?;
                    } else {
                        keep(&key, &mut map, &mut extra)?;
                    }
                }
                Ok(MessageExtras(extra))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}
