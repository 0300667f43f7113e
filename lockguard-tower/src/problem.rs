//! Refusals as responses: RFC 9457 `application/problem+json` bodies.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Response, StatusCode};

/// The media type of a problem body.
pub(crate) const PROBLEM_JSON: &str = "application/problem+json";

/// The problem type of draft-ietf-httpapi-ratelimit-headers for a request
/// over one or more quota policies.
pub(crate) const QUOTA_EXCEEDED: &str =
    "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// A problem response: `status` with a JSON body holding `type`, `title`,
/// `status`, `detail`, and the given extension members (already valid JSON
/// values).
pub(crate) fn response(
    status: StatusCode,
    detail: &str,
    extensions: &[(&str, String)],
) -> Response<Bytes> {
    let title = status.canonical_reason().unwrap_or("Error");
    typed(status, "about:blank", title, detail, extensions)
}

/// A problem response of type `problem_type` with `title`.
pub(crate) fn typed(
    status: StatusCode,
    problem_type: &str,
    title: &str,
    detail: &str,
    extensions: &[(&str, String)],
) -> Response<Bytes> {
    let mut body = String::with_capacity(128);
    body.push_str("{\"type\":");
    push_json_string(&mut body, problem_type);
    body.push_str(",\"title\":");
    push_json_string(&mut body, title);
    body.push_str(",\"status\":");
    body.push_str(&status.as_u16().to_string());
    body.push_str(",\"detail\":");
    push_json_string(&mut body, detail);
    for (name, value) in extensions {
        body.push(',');
        push_json_string(&mut body, name);
        body.push(':');
        body.push_str(value);
    }
    body.push('}');
    let mut res = Response::new(Bytes::from(body));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    res
}

/// Appends `s` as a JSON string literal.
pub(crate) fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_is_escaped_json_with_the_status() {
        let res = response(
            StatusCode::TOO_MANY_REQUESTS,
            "limit \"login\" \\ hit\n\u{1}",
            &[("retry_after", "3".to_owned())],
        );
        assert_eq!(res.status(), 429);
        assert_eq!(res.headers()[CONTENT_TYPE], PROBLEM_JSON);
        assert_eq!(
            res.body(),
            &Bytes::from_static(
                br#"{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"limit \"login\" \\ hit\n\u0001","retry_after":3}"#
            )
        );
    }
}
