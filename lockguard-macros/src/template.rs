//! Key templates: `"order:{order_id}"`, `"user:{user.id}"`,
//! `"tenant:{self.tenant}"`, formatted with `Display` at each call.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::visit::Visit;
use syn::{FnArg, Ident, Index, LitStr, Signature};

/// What a placeholder may name: the function's argument bindings, and
/// `self` in a method.
pub(crate) struct Scope {
    fn_name: String,
    bindings: Vec<Ident>,
    has_self: bool,
}

impl Scope {
    pub(crate) fn of(sig: &Signature) -> Self {
        let mut collect = Bindings(Vec::new());
        let mut has_self = false;
        for arg in &sig.inputs {
            match arg {
                FnArg::Receiver(_) => has_self = true,
                FnArg::Typed(pat) => collect.visit_pat(&pat.pat),
            }
        }
        Self {
            fn_name: sig.ident.to_string(),
            bindings: collect.0,
            has_self,
        }
    }

    fn has(&self, name: &str) -> bool {
        (name == "self" && self.has_self) || self.bindings.iter().any(|b| b == name)
    }

    fn names(&self) -> String {
        let mut names: Vec<String> = self.bindings.iter().map(|b| format!("`{b}`")).collect();
        if self.has_self {
            names.insert(0, "`self`".to_owned());
        }
        if names.is_empty() {
            "it takes no arguments".to_owned()
        } else {
            format!("it can use {}", names.join(", "))
        }
    }
}

/// Every identifier an argument pattern binds (`id` in `id: u64`, `a` and
/// `b` in `(a, b): (u64, u64)`).
struct Bindings(Vec<Ident>);

impl<'ast> Visit<'ast> for Bindings {
    fn visit_pat_ident(&mut self, i: &'ast syn::PatIdent) {
        self.0.push(i.ident.clone());
        syn::visit::visit_pat_ident(self, i);
    }
}

/// One piece of a template.
#[derive(Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    /// `{a.b.0}`: the path's segments and the placeholder's byte range in
    /// the template, braces included.
    Field(Vec<String>, std::ops::Range<usize>),
}

/// Splits a template into text and placeholders; `{{` and `}}` are
/// literal braces (as for a Redis Cluster hash tag: `"{{tenant}}:{id}"`).
fn split(template: &str) -> Result<Vec<Piece>, (String, std::ops::Range<usize>)> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut chars = template.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '{' if chars.peek().map(|&(_, c)| c) == Some('{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek().map(|&(_, c)| c) == Some('}') => {
                chars.next();
                text.push('}');
            }
            '}' => {
                return Err((
                    "unmatched `}` in the key; write `}}` for a literal brace".to_owned(),
                    i..i + 1,
                ));
            }
            '{' => {
                let Some(len) = template[i + 1..].find('}') else {
                    return Err((
                        "unclosed `{` in the key; write `{{` for a literal brace".to_owned(),
                        i..template.len(),
                    ));
                };
                let end = i + 1 + len;
                let inner = &template[i + 1..end];
                let range = i..end + 1;
                let segments: Vec<String> = inner.split('.').map(str::to_owned).collect();
                if inner.is_empty() {
                    return Err((
                        "empty placeholder `{}` in the key; name an argument, like `{order_id}`, or write `{{}}` for literal braces".to_owned(),
                        range,
                    ));
                }
                let valid = segments.iter().enumerate().all(|(n, s)| {
                    let head = n == 0 && s == "self";
                    let ident = syn::parse_str::<Ident>(s).is_ok();
                    let index = n > 0 && !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
                    head || ident || index
                });
                if !valid {
                    return Err((
                        format!(
                            "invalid placeholder `{{{inner}}}` in the key: a placeholder is an argument or `self`, then fields, like `{{user.id}}` (formatted with `Display`; format specs are not supported)"
                        ),
                        range,
                    ));
                }
                if !text.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                }
                pieces.push(Piece::Field(segments, range));
                // Skip the placeholder (byte offsets, whatever its characters).
                while chars.next_if(|&(j, _)| j <= end).is_some() {}
            }
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

/// The span of `range` of the template's value inside its literal where
/// the compiler can point there, else the whole literal.
fn span_of(lit: &LitStr, range: std::ops::Range<usize>) -> Span {
    let token = lit.token();
    let repr = token.to_string();
    // Offsets map one to one only for a plain literal without escapes.
    let plain = repr.len() == lit.value().len() + 2 && repr.starts_with('"');
    if plain && let Some(span) = token.subspan(range.start + 1..range.end + 1) {
        return span;
    }
    lit.span()
}

/// The expression that formats the key: a `String`, built at each call.
pub(crate) fn expand(
    lit: &LitStr,
    scope: &Scope,
    private: &TokenStream,
) -> syn::Result<TokenStream> {
    let template = lit.value();
    let pieces =
        split(&template).map_err(|(msg, range)| syn::Error::new(span_of(lit, range), msg))?;
    let mut format = String::new();
    let mut plain = String::new();
    let mut values = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Text(text) => {
                format.push_str(&text.replace('{', "{{").replace('}', "}}"));
                plain.push_str(&text);
            }
            Piece::Field(segments, range) => {
                let span = span_of(lit, range);
                let first = &segments[0];
                if !scope.has(first) {
                    let why = if first == "self" {
                        format!("`{}` has no `self`: it is not a method", scope.fn_name)
                    } else {
                        format!("`{}` has no argument named `{first}`", scope.fn_name)
                    };
                    return Err(syn::Error::new(
                        span,
                        format!(
                            "unknown placeholder `{{{}}}` in the key: {why}; {}",
                            segments.join("."),
                            scope.names()
                        ),
                    ));
                }
                // The identifiers resolve where the function's arguments
                // live: the literal's span is the call site's.
                let head = Ident::new(first, lit.span());
                let mut fields = Vec::new();
                for s in &segments[1..] {
                    if s.bytes().all(|b| b.is_ascii_digit()) {
                        let index: u32 = s.parse().map_err(|_| {
                            syn::Error::new(span, format!("field index `{s}` is out of range"))
                        })?;
                        let index = Index {
                            index,
                            span: lit.span(),
                        };
                        fields.push(quote!(.#index));
                    } else {
                        let ident = Ident::new(s, lit.span());
                        fields.push(quote!(.#ident));
                    }
                }
                format.push_str("{}");
                values.push(quote!(#head #(#fields)*));
            }
        }
    }
    if values.is_empty() {
        return Ok(quote!(#private::String::from(#plain)));
    }
    Ok(quote!(#private::format!(#format, #(#values),*)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(sig: &str) -> Scope {
        Scope::of(&syn::parse_str::<Signature>(sig).unwrap())
    }

    fn expand_str(template: &str, sig: &str) -> Result<String, String> {
        let lit = LitStr::new(template, Span::call_site());
        expand(&lit, &scope(sig), &quote!(p))
            .map(|t| t.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn splits_text_and_placeholders() {
        assert_eq!(split("global"), Ok(vec![Piece::Text("global".into())]));
        assert_eq!(
            split("order:{id}:x"),
            Ok(vec![
                Piece::Text("order:".into()),
                Piece::Field(vec!["id".into()], 6..10),
                Piece::Text(":x".into()),
            ])
        );
        assert_eq!(
            split("{{t}}:{a.b.0}"),
            Ok(vec![
                Piece::Text("{t}:".into()),
                Piece::Field(vec!["a".into(), "b".into(), "0".into()], 6..13),
            ])
        );
        for bad in [
            "{", "}", "a{b", "{}", "{a b}", "{0}", "{a.}", "{a:?}", "{.a}", "{type}", "{a.²}",
            "{_}",
        ] {
            assert!(split(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn resolves_arguments_fields_and_self() {
        let sig = "async fn f(&self, order_id: u64, user: &User, (a, mut b): (u8, u8))";
        assert_eq!(
            expand_str("order:{order_id}", sig).unwrap(),
            r#"p :: format ! ("order:{}" , order_id)"#
        );
        assert_eq!(
            expand_str("{self.tenant}/{user.id}/{b}/{user.pair.0}", sig).unwrap(),
            r#"p :: format ! ("{}/{}/{}/{}" , self . tenant , user . id , b , user . pair . 0)"#
        );
        assert_eq!(
            expand_str("ü:{ünï}:é", "async fn f(ünï: u8)").unwrap(),
            r#"p :: format ! ("ü:{}:é" , ünï)"#
        );
        assert_eq!(
            expand_str("{{hash}}:global", sig).unwrap(),
            r#"p :: String :: from ("{hash}:global")"#
        );
    }

    #[test]
    fn unknown_placeholders_are_errors() {
        let e = expand_str("order:{ordr}", "async fn f(order: u64)").unwrap_err();
        assert!(
            e.contains("no argument named `ordr`") && e.contains("`order`"),
            "{e}"
        );
        let e = expand_str("{self.id}", "async fn f(id: u64)").unwrap_err();
        assert!(e.contains("not a method"), "{e}");
        let e = expand_str("{x}", "async fn f(_: u64)").unwrap_err();
        assert!(e.contains("takes no arguments"), "{e}");
    }

    /// Every template of up to five characters over an alphabet of the
    /// tricky ones gives a key or an error, never a panic.
    #[test]
    fn no_template_panics() {
        let alphabet = ['{', '}', 'a', '.', '0', 'ü', ' ', ':'];
        let mut templates = vec![String::new()];
        for _ in 0..5 {
            let longer: Vec<String> = templates
                .iter()
                .flat_map(|t| alphabet.iter().map(move |c| format!("{t}{c}")))
                .collect();
            templates.extend(longer);
            templates.dedup();
        }
        for t in &templates {
            let _ = expand_str(t, "async fn f(&self, a: u8)");
        }
    }
}
