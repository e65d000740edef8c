//! Prompt tokens of images, audio and files, estimated before the call so that token budgets hold for media
//! too; the reservation is settled with the provider's real usage after the call, as for text.
//!
//! An image's tokens follow from its pixel size, read from its header by `imagesize` (no decoding). Which
//! provider will see it is not known here, so the estimate is the larger of the two documented formulas:
//! OpenAI's tiles (fit within 2048×2048, shortest side scaled to 768, 170 tokens per 512-pixel tile plus 85;
//! `detail: low` is 85) and Anthropic's `width × height / 750` after fitting the long side within 1568 pixels.
//! An image by URL is not fetched: it counts as the largest image either provider takes. Audio and documents
//! count as their bytes over the characters-per-token ratio (a conservative bound for PDFs and WAV alike).

use tower_chat::{Content, DataUrl, ImageDetail, ImagePart, MediaSource, Part};

/// Bytes read from the start of an image for its size: every format's header, and a JPEG's first metadata
/// segment (at most 64 KiB) before its frame header.
const IMAGE_HEAD_BYTES: usize = 64 * 1024;

/// Tokens of an image whose size is unknown (a URL): the most either provider charges for one image.
pub(crate) const UNKNOWN_IMAGE_TOKENS: u64 = 1_600;

/// The estimated prompt tokens of a content's media parts (text is counted by characters elsewhere).
pub(crate) fn media_tokens(content: &Content, chars_per_token: u32) -> u64 {
    content
        .parts()
        .iter()
        .map(|part| match part {
            Part::Text(_) => 0,
            Part::Image(image) => image_tokens(image),
            other => (other.media_bytes() as u64).div_ceil(u64::from(chars_per_token.max(1))),
        })
        .sum()
}

fn image_tokens(image: &ImagePart) -> u64 {
    if image.detail == Some(ImageDetail::Low) {
        return 85;
    }
    let size = match &image.source {
        // The header from the start of the bytes; a blob that holds only its base64 is not decoded whole
        // unless the header runs past that (a JPEG's metadata segments), and then for this read alone.
        MediaSource::Data(blob) => imagesize::blob_size(&blob.head(IMAGE_HEAD_BYTES))
            .ok()
            .or_else(|| {
                (blob.len() > IMAGE_HEAD_BYTES)
                    .then(|| imagesize::blob_size(&blob.to_bytes()).ok())
                    .flatten()
            }),
        MediaSource::Url { url } => DataUrl::parse(url).ok().and_then(|data| {
            // Enough of the base64 to hold any of the formats' headers.
            let head = &data.base64[..data.base64.len().min(4096) / 4 * 4];
            let bytes = tower_chat::Blob::from_base64(head, data.media_type).ok()?;
            imagesize::blob_size(bytes.bytes()).ok()
        }),
        MediaSource::FileId { .. } => None,
    };
    match size {
        Some(size) => openai_tiles(size.width as u64, size.height as u64)
            .max(anthropic_tokens(size.width as u64, size.height as u64)),
        None => UNKNOWN_IMAGE_TOKENS,
    }
}

/// OpenAI's high-detail tile count formula.
fn openai_tiles(width: u64, height: u64) -> u64 {
    if width == 0 || height == 0 {
        return 85;
    }
    let (mut w, mut h) = (width as f64, height as f64);
    let fit = (2048.0 / w.max(h)).min(1.0);
    w *= fit;
    h *= fit;
    let shortest = (768.0 / w.min(h)).min(1.0);
    w *= shortest;
    h *= shortest;
    let tiles = (w / 512.0).ceil() * (h / 512.0).ceil();
    85 + 170 * tiles as u64
}

/// Anthropic's `width × height / 750`, after fitting the long side within 1568 pixels.
fn anthropic_tokens(width: u64, height: u64) -> u64 {
    let long = width.max(height).max(1) as f64;
    let fit = (1568.0 / long).min(1.0);
    let pixels = (width as f64 * fit) * (height as f64 * fit);
    (pixels / 750.0).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PNG header of the given size: the signature and an IHDR chunk are all `imagesize` reads.
    fn png(width: u32, height: u32) -> Vec<u8> {
        let mut bytes = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13];
        bytes.extend_from_slice(b"IHDR");
        bytes.extend_from_slice(&width.to_be_bytes());
        bytes.extend_from_slice(&height.to_be_bytes());
        bytes.extend_from_slice(&[8, 6, 0, 0, 0, 0, 0, 0, 0]);
        bytes
    }

    #[test]
    fn the_documented_examples_come_out() {
        // OpenAI's examples: 1024×1024 high detail is 765 tokens; 2048×4096 is 1105.
        assert_eq!(openai_tiles(1024, 1024), 765);
        assert_eq!(openai_tiles(2048, 4096), 1105);
        // Anthropic's table: 1092×1092 is ~1590 tokens; 200×200 is ~54.
        assert_eq!(anthropic_tokens(1092, 1092), 1590);
        assert_eq!(anthropic_tokens(200, 200), 54);
    }

    #[test]
    fn an_image_costs_the_larger_estimate_and_a_url_the_most() {
        let content = Content::from_parts(vec![
            Part::text("hi"),
            Part::image(png(1092, 1092), "image/png"),
        ]);
        assert_eq!(media_tokens(&content, 4), 1590);
        let url = Content::from_parts(vec![Part::image_url("https://example.com/x.png")]);
        assert_eq!(media_tokens(&url, 4), UNKNOWN_IMAGE_TOKENS);
        let tiny = tower_chat::Blob::new(png(200, 200), "image/png");
        let data_url = Content::from_parts(vec![Part::image_url(tiny.to_data_url())]);
        assert_eq!(media_tokens(&data_url, 4), openai_tiles(200, 200).max(54));
    }

    #[test]
    fn an_image_sent_as_base64_is_sized_from_its_header_alone() {
        let mut bytes = png(1092, 1092);
        // Past the head read for the size: the rest of a large image stays base64.
        bytes.resize(3 * IMAGE_HEAD_BYTES, 0);
        let url = format!(
            "data:image/png;base64,{}",
            tower_chat::Blob::new(bytes, "image/png").base64()
        );
        let blob = tower_chat::Blob::from_data_url_string(url).unwrap();
        let content = Content::from_parts(vec![Part::from(ImagePart {
            source: MediaSource::Data(blob.clone()),
            detail: None,
            cache: None,
        })]);
        assert_eq!(media_tokens(&content, 4), 1590);
        assert!(!blob.is_decoded());
    }

    #[test]
    fn documents_count_by_their_bytes() {
        let content =
            Content::from_parts(vec![Part::file(vec![0u8; 4000], "application/pdf", None)]);
        assert_eq!(media_tokens(&content, 4), 1000);
    }
}
