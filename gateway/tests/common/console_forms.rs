//! Posting the console's own forms as a browser would, and reading what its pages answer: the CSRF token a form
//! must carry, an element's text, a logged-in operator's `GET`s and form `POST`s.

use super::{send, Answer, Harness};

/// The text between `start` and the next `<` after it.
pub fn text_after<'a>(html: &'a str, start: &str) -> &'a str {
    let at = html
        .find(start)
        .unwrap_or_else(|| panic!("no {start} in {html}"))
        + start.len();
    &html[at..at + html[at..].find('<').unwrap()]
}

/// A page's CSRF token (its `<meta name="csrf-token">`).
pub fn csrf(html: &str) -> String {
    let at = html.find("name=\"csrf-token\" content=\"").unwrap() + 27;
    html[at..at + html[at..].find('"').unwrap()].to_owned()
}

/// An operator logged in to the console of `gw` (its session cookie).
pub struct Console<'a> {
    pub gw: &'a Harness,
    pub cookie: String,
}

impl Console<'_> {
    /// `GET path` with the session, which must answer `200`.
    pub async fn get(&self, path: &str) -> Answer {
        let answer = send("GET", &self.gw.url(path), &[("cookie", &self.cookie)], "").await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        answer
    }

    /// Post `fields` to `path` as a form of the console's own pages.
    pub async fn form(&self, path: &str, fields: &[(&str, &str)]) -> Answer {
        let body: Vec<String> = fields
            .iter()
            .map(|(k, v)| format!("{k}={}", v.replace('*', "%2A").replace(' ', "+")))
            .collect();
        send(
            "POST",
            &self.gw.url(path),
            &[
                ("cookie", &self.cookie),
                ("content-type", "application/x-www-form-urlencoded"),
                ("sec-fetch-site", "same-origin"),
            ],
            &body.join("&"),
        )
        .await
    }
}
