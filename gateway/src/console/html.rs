//! The console's HTML builder: the one place text becomes markup.
//!
//! Markup the builder writes verbatim is `&'static str` only (tag names, attribute names, literal fragments in
//! the source); every other string — a tool's arguments, a message, a conversation id, a number — goes through
//! [`escape_into`]. So a value can reach a page only escaped, whatever the page's code does with it.
//!
//! ```ignore
//! let mut page = Html::new();
//! page.open("p", &[("class", "note")]);
//! page.text("<script>alert(1)</script>");
//! page.close("p");
//! assert_eq!(page.finish(), "<p class=\"note\">&lt;script&gt;alert(1)&lt;/script&gt;</p>");
//! ```

use std::fmt::Write as _;

/// Escape `text` for HTML text and double-quoted attribute values: `&`, `<`, `>`, `"` and `'` become
/// character references; everything else is kept (the pages are UTF-8).
pub(crate) fn escape_into(out: &mut String, text: &str) {
    let mut rest = text;
    while let Some(at) = rest.find(['&', '<', '>', '"', '\'']) {
        out.push_str(&rest[..at]);
        out.push_str(match rest.as_bytes()[at] {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' => "&quot;",
            _ => "&#39;",
        });
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
}

/// [`escape_into`] a fresh string.
#[cfg(test)]
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    escape_into(&mut out, text);
    out
}

/// Percent-encode `text` for a URL query value or path segment (unreserved characters kept).
pub(crate) fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Markup a builder finished ([`Html::into_fragment`]), kept to be inserted again (a cached page part).
#[derive(Clone, Debug)]
pub(crate) struct Fragment(std::sync::Arc<str>);

/// A page or fragment being written. See the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct Html {
    out: String,
}

impl Html {
    pub(crate) fn new() -> Self {
        Html {
            out: String::with_capacity(8 * 1024),
        }
    }

    /// `<tag a="v" …>`; values escaped.
    pub(crate) fn open(&mut self, tag: &'static str, attributes: &[(&'static str, &str)]) {
        self.start(tag, attributes);
        self.out.push('>');
    }

    fn start(&mut self, tag: &'static str, attributes: &[(&'static str, &str)]) {
        self.out.push('<');
        self.out.push_str(tag);
        for (name, value) in attributes {
            self.out.push(' ');
            self.out.push_str(name);
            self.out.push_str("=\"");
            escape_into(&mut self.out, value);
            self.out.push('"');
        }
    }

    /// `</tag>`.
    pub(crate) fn close(&mut self, tag: &'static str) {
        self.out.push_str("</");
        self.out.push_str(tag);
        self.out.push('>');
    }

    /// `<tag …>text</tag>`.
    pub(crate) fn element(
        &mut self,
        tag: &'static str,
        attributes: &[(&'static str, &str)],
        text: &str,
    ) {
        self.open(tag, attributes);
        self.text(text);
        self.close(tag);
    }

    /// A void element (`<input …>`, `<meta …>`, SVG shapes are closed with `/>`).
    /// SVG inside HTML needs the self-closing form; HTML void elements accept it.
    pub(crate) fn void(&mut self, tag: &'static str, attributes: &[(&'static str, &str)]) {
        self.start(tag, attributes);
        self.out.push_str("/>");
    }

    /// Escaped text.
    pub(crate) fn text(&mut self, text: &str) {
        escape_into(&mut self.out, text);
    }

    /// Markup written in the source (never a value).
    pub(crate) fn markup(&mut self, markup: &'static str) {
        self.out.push_str(markup);
    }

    /// Finish as a fragment to insert into other pages later ([`Html::fragment`]).
    pub(crate) fn into_fragment(self) -> Fragment {
        Fragment(self.out.into())
    }

    /// A fragment another builder wrote (only a builder makes one, so it is escaped already).
    pub(crate) fn fragment(&mut self, fragment: &Fragment) {
        self.out.push_str(&fragment.0);
    }

    pub(crate) fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Strings an attacker controls (tool arguments, messages, conversation ids) come out inert: no tag, no
    /// attribute break-out, no entity trickery survives.
    #[test]
    fn hostile_strings_are_inert_in_text_and_attributes() {
        let hostile = [
            "<script>alert(1)</script>",
            "\"><img src=x onerror=alert(1)>",
            "'><svg onload=alert(1)>",
            "&lt;script&gt; already escaped",
            "</textarea><script>x</script>",
            "javascript:alert(1)",
            "a\u{0}b\u{202e}c <!-- --> ]]>",
        ];
        for text in hostile {
            let mut page = Html::new();
            page.open("div", &[("title", text), ("data-x", text)]);
            page.text(text);
            page.close("div");
            let out = page.finish();
            let inner = &out[out.find('>').unwrap() + 1..out.rfind("</div>").unwrap()];
            assert!(!inner.contains(['<', '>', '"', '\'']), "{out}");
            // The only quotes are the ones delimiting the two attribute values; one tag opens.
            let head = &out[..out.find('>').unwrap()];
            assert_eq!(head.matches('"').count(), 4, "{out}");
            assert_eq!(head.matches('<').count(), 1, "{out}");
            assert!(!head.contains('\''), "{out}");
            assert_eq!(unescape(inner), text, "escaping loses nothing");
        }
        assert_eq!(escape("a&b<c>d\"e'f"), "a&amp;b&lt;c&gt;d&quot;e&#39;f");
        assert_eq!(escape("plain ünïcode"), "plain ünïcode");
    }

    #[test]
    fn url_values_are_percent_encoded() {
        assert_eq!(
            url_encode("alice/c 1?&=#\"<"),
            "alice%2Fc%201%3F%26%3D%23%22%3C"
        );
        assert_eq!(url_encode("apr_0-9.~"), "apr_0-9.~");
    }

    #[test]
    fn svg_shapes_self_close_and_html_voids_too() {
        let mut page = Html::new();
        page.void("circle", &[("cx", "1")]);
        page.void("input", &[("name", "a")]);
        assert_eq!(page.finish(), "<circle cx=\"1\"/><input name=\"a\"/>");
    }

    fn unescape(text: &str) -> String {
        text.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&amp;", "&")
    }
}
