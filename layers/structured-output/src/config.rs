//! What a [`StructuredOutputLayer`](crate::StructuredOutputLayer) is configured with, held by every service it
//! builds.

/// How answers are checked: repairs allowed, and whether parsed values stream as they grow.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Config {
    pub(crate) repairs: usize,
    pub(crate) partial_answers: bool,
}
