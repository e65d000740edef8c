//! Judging a message's content parts: each run of adjacent text parts as one text (a match split between two
//! parts or Anthropic text blocks is found), text documents (a file part whose bytes are text), the URLs of
//! images and files, and parts kept as their provider's JSON. Binary media (images, audio, PDFs by their bytes)
//! and file ids are not read.

use tower_chat::{
    Blob, ChatError, FilePart, GuardrailStage, GuardrailVerdict, ImagePart, MediaSource, Part,
    ProviderPart, TextPart,
};

use crate::json::judge_json;
use crate::policy::{judge, judge_whole, scan_pieces, Judged, StagePolicy};
use crate::scan::Budget;

/// What judging a content decided.
#[derive(Debug, Default)]
pub(crate) struct JudgedParts {
    pub(crate) verdicts: Vec<GuardrailVerdict>,
    pub(crate) block: Option<GuardrailVerdict>,
    /// The parts that changed, by index, as they go on.
    pub(crate) changed: Vec<(usize, Part)>,
}

/// Whether a document of this media type is text the checks can read.
fn is_text(media_type: &str) -> bool {
    let essence = media_type.split(';').next().unwrap_or("").trim();
    essence.starts_with("text/")
        || matches!(
            essence,
            "application/json" | "application/xml" | "application/x-yaml" | "application/yaml"
        )
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
}

/// Judge `parts` with the checks of `stage` (verdicts located at `location`; a part other than a text run at
/// `location.content[i]`); the whole-text checks read text parts and documents when `whole`. Stops at the first
/// block.
pub(crate) async fn judge_parts(
    policy: &StagePolicy,
    stage: GuardrailStage,
    location: &str,
    parts: &[Part],
    whole: bool,
    budget: &mut Budget,
) -> Result<JudgedParts, ChatError> {
    let mut judged = JudgedParts::default();
    if policy.is_empty() {
        return Ok(judged);
    }
    let mut index = 0;
    while index < parts.len() {
        let run: Vec<&TextPart> = parts[index..]
            .iter()
            .map_while(|part| match part {
                Part::Text(text) => Some(text),
                _ => None,
            })
            .collect();
        if !run.is_empty() {
            let first = index;
            index += run.len();
            let pieces: Vec<&str> = run.iter().map(|text| text.text.as_str()).collect();
            let scanned = scan_pieces(policy, stage, location, &pieces, budget);
            judged.verdicts.extend(scanned.verdicts);
            if scanned.block.is_some() {
                judged.block = scanned.block;
                return Ok(judged);
            }
            for (offset, (text, current)) in run.iter().zip(scanned.pieces).enumerate() {
                let mut whole_judged = Judged::default();
                let current = judge_whole(
                    policy,
                    stage,
                    location,
                    &text.text,
                    current,
                    whole,
                    &mut whole_judged,
                )
                .await?;
                judged.verdicts.extend(whole_judged.verdicts);
                if whole_judged.block.is_some() {
                    judged.block = whole_judged.block;
                    return Ok(judged);
                }
                if let Some(redacted) = current {
                    judged.changed.push((
                        first + offset,
                        Part::Text(TextPart {
                            text: redacted,
                            cache: text.cache.clone(),
                        }),
                    ));
                }
            }
            continue;
        }
        let at = format!("{location}.content[{index}]");
        let part = &parts[index];
        index += 1;
        if let Part::Provider(raw) = part {
            let outcome = judge_json(policy, stage, &at, &raw.value, false, budget).await?;
            judged.verdicts.extend(outcome.verdicts);
            if outcome.block.is_some() {
                judged.block = outcome.block;
                return Ok(judged);
            }
            if let Some(value) = outcome.redacted {
                let provider = raw.provider.clone();
                judged
                    .changed
                    .push((index - 1, Part::from(ProviderPart { provider, value })));
            }
            continue;
        }
        let Some((text, document)) = readable(part) else {
            continue;
        };
        let outcome = judge(policy, stage, &at, text, whole && document, budget).await?;
        judged.verdicts.extend(outcome.verdicts);
        if outcome.block.is_some() {
            judged.block = outcome.block;
            return Ok(judged);
        }
        if let Some(redacted) = outcome.redacted {
            judged.changed.push((index - 1, with_text(part, redacted)));
        }
    }
    Ok(judged)
}

/// The text a media part carries for the checks: a text document's bytes (`true`: the whole-text checks read it
/// too), or an image's or file's URL (`false`).
fn readable(part: &Part) -> Option<(&str, bool)> {
    let source = match part {
        Part::File(file) => &file.source,
        Part::Image(image) => &image.source,
        _ => return None,
    };
    match source {
        MediaSource::Url { url } => Some((url, false)),
        MediaSource::Data(blob) if matches!(part, Part::File(_)) && is_text(blob.media_type()) => {
            std::str::from_utf8(blob.bytes())
                .ok()
                .map(|text| (text, true))
        }
        _ => None,
    }
}

/// `part` with the text [`readable`] gave replaced by `text`.
fn with_text(part: &Part, text: String) -> Part {
    let source = |source: &MediaSource| match source {
        MediaSource::Data(blob) => {
            MediaSource::Data(Blob::new(text.into_bytes(), blob.media_type()))
        }
        _ => MediaSource::Url { url: text },
    };
    match part {
        Part::File(file) => Part::from(FilePart {
            source: source(&file.source),
            ..(**file).clone()
        }),
        Part::Image(image) => Part::from(ImagePart {
            source: source(&image.source),
            ..(**image).clone()
        }),
        other => other.clone(),
    }
}
