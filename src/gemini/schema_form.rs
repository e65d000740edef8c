//! How tool parameter and answer schemas travel to Gemini: JSON Schema itself, or lowered to the OpenAPI subset.

/// How a [`GeminiChat`](super::GeminiChat) sends tool parameter and answer schemas.
///
/// Gemini takes JSON Schema itself in `FunctionDeclaration.parametersJsonSchema` and
/// `GenerationConfig.responseJsonSchema`, on the Gemini API (`v1beta`) and on Vertex AI (`v1`), for every
/// actively supported model (Google's structured-output announcement of November 2025; Gemini 2.5 and later).
/// Older models and some proxies take only the OpenAPI 3.0 subset of `parameters` / `responseSchema`: for them,
/// [`OpenApiSubset`](SchemaForm::OpenApiSubset) lowers each schema with [`to_gemini_schema`](super::to_gemini_schema).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchemaForm {
    /// JSON Schema as written (the default): tools as `parametersJsonSchema` (without `$schema`, which Gemini
    /// refuses), answers as `responseJsonSchema` (keywords Gemini does not document moved into `description`,
    /// see [`output_schema`](crate::output_schema)). Schemas over
    /// [`SchemaLimits::DEFAULT`](crate::schema_limits::SchemaLimits) are refused before sending.
    #[default]
    JsonSchema,
    /// The OpenAPI subset: tools as `parameters`, answers as `responseSchema`, each lowered by
    /// [`to_gemini_schema`](super::to_gemini_schema); a schema that cannot be lowered is refused before sending, naming the tool and the
    /// place (an answer schema goes as `responseJsonSchema` instead).
    OpenApiSubset,
}

impl std::str::FromStr for SchemaForm {
    type Err = String;

    /// `json-schema` or `openapi` (as a configuration file spells them).
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "json-schema" => Ok(SchemaForm::JsonSchema),
            "openapi" => Ok(SchemaForm::OpenApiSubset),
            other => Err(format!(
                "`{other}` is not a Gemini schema form (`json-schema` or `openapi`)"
            )),
        }
    }
}
