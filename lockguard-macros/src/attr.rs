//! The arguments of the three attributes: parsed with custom keywords and
//! lookahead, checked at compile time, every error spanned on the option
//! or value at fault.

use std::time::Duration;

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Lookahead1, ParseStream};
use syn::{Expr, Ident, LitInt, LitStr, Path, Token};

use crate::duration::{self, DURATION_HELP};
use crate::rate::{self, MAX_QUOTA, Rate};

mod kw {
    syn::custom_keyword!(key);
    syn::custom_keyword!(ttl);
    syn::custom_keyword!(watchdog);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(at_least);
    syn::custom_keyword!(skip_if_busy);
    syn::custom_keyword!(keep_going_on_lost);
    syn::custom_keyword!(client);
    syn::custom_keyword!(rate);
    syn::custom_keyword!(burst);
    syn::custom_keyword!(algorithm);
    syn::custom_keyword!(name);
    syn::custom_keyword!(cost);
    syn::custom_keyword!(permits);
    syn::custom_keyword!(mode);
}

/// The longest lease a lock accepts (`lockguard::MAX_LEASE`): one day.
const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);

/// The shortest lease a lock accepts (`lockguard::MIN_LEASE`).
const MIN_LEASE: Duration = Duration::from_millis(10);

/// The shortest lease the watchdog renews (`lockguard::MIN_WATCHDOG_LEASE`).
const MIN_WATCHDOG_LEASE: Duration = Duration::from_millis(100);

/// The most permits a semaphore may have (`lockguard::MAX_PERMITS`).
const MAX_PERMITS: u64 = 1_000_000;

/// Which attribute is being expanded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Lock,
    RateLimit,
    ConcurrencyLimit,
}

impl Kind {
    /// The attribute as users write it, for messages.
    pub(crate) fn attr(self) -> &'static str {
        match self {
            Self::Lock => "#[distributed_lock]",
            Self::RateLimit => "#[rate_limit]",
            Self::ConcurrencyLimit => "#[concurrency_limit]",
        }
    }

    /// The options this attribute takes, in the order the docs list them.
    fn options(self) -> &'static [Opt] {
        use Opt::*;
        match self {
            Self::Lock => &[
                Key,
                Mode,
                Ttl,
                Watchdog,
                Wait,
                AtLeast,
                SkipIfBusy,
                KeepGoingOnLost,
                Client,
                Crate,
            ],
            Self::RateLimit => &[Key, Rate, Burst, Algorithm, Name, Cost, Client, Crate],
            Self::ConcurrencyLimit => &[
                Key,
                Permits,
                Ttl,
                Watchdog,
                Wait,
                SkipIfBusy,
                KeepGoingOnLost,
                Client,
                Crate,
            ],
        }
    }
}

/// One option name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opt {
    Key,
    Ttl,
    Watchdog,
    Wait,
    AtLeast,
    SkipIfBusy,
    KeepGoingOnLost,
    Client,
    Crate,
    Rate,
    Burst,
    Algorithm,
    Name,
    Cost,
    Permits,
    Mode,
}

impl Opt {
    fn name(self) -> &'static str {
        match self {
            Self::Key => "key",
            Self::Ttl => "ttl",
            Self::Watchdog => "watchdog",
            Self::Wait => "wait",
            Self::AtLeast => "at_least",
            Self::SkipIfBusy => "skip_if_busy",
            Self::KeepGoingOnLost => "keep_going_on_lost",
            Self::Client => "client",
            Self::Crate => "crate",
            Self::Rate => "rate",
            Self::Burst => "burst",
            Self::Algorithm => "algorithm",
            Self::Name => "name",
            Self::Cost => "cost",
            Self::Permits => "permits",
            Self::Mode => "mode",
        }
    }

    /// Whether the next token is this option's keyword. Each peek is
    /// recorded by `la`, so its error lists exactly the options peeked.
    fn peek(self, la: &Lookahead1<'_>) -> bool {
        match self {
            Self::Key => la.peek(kw::key),
            Self::Ttl => la.peek(kw::ttl),
            Self::Watchdog => la.peek(kw::watchdog),
            Self::Wait => la.peek(kw::wait),
            Self::AtLeast => la.peek(kw::at_least),
            Self::SkipIfBusy => la.peek(kw::skip_if_busy),
            Self::KeepGoingOnLost => la.peek(kw::keep_going_on_lost),
            Self::Client => la.peek(kw::client),
            Self::Crate => la.peek(Token![crate]),
            Self::Rate => la.peek(kw::rate),
            Self::Burst => la.peek(kw::burst),
            Self::Algorithm => la.peek(kw::algorithm),
            Self::Name => la.peek(kw::name),
            Self::Cost => la.peek(kw::cost),
            Self::Permits => la.peek(kw::permits),
            Self::Mode => la.peek(kw::mode),
        }
    }

    fn is_flag(self) -> bool {
        matches!(self, Self::SkipIfBusy | Self::KeepGoingOnLost)
    }
}

/// A value and the span of the literal it came from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Located<T> {
    pub(crate) value: T,
    pub(crate) span: Span,
}

/// The rate-limiting algorithm named by `algorithm = "..."`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Algorithm {
    Gcra,
    FixedWindow,
    SlidingWindow,
}

/// The hold of a read-write lock named by `mode = "..."`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Read,
    Write,
}

/// The parsed and checked arguments of one attribute.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) key: Option<LitStr>,
    pub(crate) ttl: Option<Located<Duration>>,
    pub(crate) watchdog: Option<Located<Duration>>,
    pub(crate) wait: Option<Located<Duration>>,
    pub(crate) at_least: Option<Located<Duration>>,
    pub(crate) skip_if_busy: Option<Span>,
    pub(crate) keep_going_on_lost: Option<Span>,
    pub(crate) client: Option<Expr>,
    pub(crate) krate: Option<Path>,
    pub(crate) rate: Option<Located<Rate>>,
    pub(crate) burst: Option<Located<u64>>,
    pub(crate) algorithm: Option<Located<Algorithm>>,
    pub(crate) name: Option<LitStr>,
    pub(crate) cost: Option<Located<u64>>,
    pub(crate) permits: Option<Located<u32>>,
    pub(crate) mode: Option<Located<Mode>>,
    /// Where each option's name was written, for errors about options
    /// that exclude each other.
    names: Vec<(Opt, Span)>,
}

impl Args {
    /// Parses the arguments of `kind`'s attribute.
    pub(crate) fn parse(kind: Kind, input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Self::default();

        while !input.is_empty() {
            let la = input.lookahead1();
            let Some(opt) = kind.options().iter().copied().find(|o| o.peek(&la)) else {
                return Err(unknown_option(kind, input, la));
            };
            let ident = input.call(Ident::parse_any)?;
            if args.names.iter().any(|(seen, _)| *seen == opt) {
                return Err(syn::Error::new(
                    ident.span(),
                    format!("duplicate option `{}` in {}", opt.name(), kind.attr()),
                ));
            }
            args.names.push((opt, ident.span()));
            if opt.is_flag() {
                if input.peek(Token![=]) {
                    return Err(syn::Error::new(
                        input.span(),
                        format!("`{}` is a flag and takes no value", opt.name()),
                    ));
                }
            } else {
                input.parse::<Token![=]>()?;
            }
            args.parse_value(opt, &ident, input)?;
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        args.check(kind)?;
        Ok(args)
    }

    fn parse_value(&mut self, opt: Opt, ident: &Ident, input: ParseStream<'_>) -> syn::Result<()> {
        match opt {
            Opt::Key => self.key = Some(lit_str(input, "the key, like \"order:{order_id}\"")?),
            Opt::Ttl => {
                let d = duration_value(input)?;
                check_lease(d, "ttl", MIN_LEASE)?;
                self.ttl = Some(d);
            }
            Opt::Watchdog => {
                let d = duration_value(input)?;
                check_lease(d, "watchdog", MIN_WATCHDOG_LEASE)?;
                self.watchdog = Some(d);
            }
            Opt::Wait => self.wait = Some(duration_value(input)?),
            Opt::AtLeast => {
                let d = duration_value(input)?;
                check_lease(d, "at_least", Duration::from_millis(1))?;
                self.at_least = Some(d);
            }
            Opt::SkipIfBusy => self.skip_if_busy = Some(ident.span()),
            Opt::KeepGoingOnLost => self.keep_going_on_lost = Some(ident.span()),
            Opt::Client => self.client = Some(input.parse()?),
            Opt::Crate => {
                let lit = lit_str(input, "the path of the lockguard crate, like \"lockguard\"")?;
                let path = lit.parse_with(Path::parse_mod_style).map_err(|_| {
                    syn::Error::new(lit.span(), format!("{:?} is not a crate path", lit.value()))
                })?;
                self.krate = Some(path);
            }
            Opt::Rate => {
                let lit = lit_str(input, "a rate, like \"10/s\"")?;
                let value =
                    rate::parse(&lit.value()).map_err(|e| syn::Error::new(lit.span(), e))?;
                self.rate = Some(Located {
                    value,
                    span: lit.span(),
                });
            }
            Opt::Burst => self.burst = Some(int_value(input, "burst", 1, MAX_QUOTA)?),
            Opt::Cost => self.cost = Some(int_value(input, "cost", 1, MAX_QUOTA)?),
            Opt::Permits => {
                let n = int_value(input, "permits", 1, MAX_PERMITS)?;
                self.permits = Some(Located {
                    value: u32::try_from(n.value).unwrap_or(u32::MAX),
                    span: n.span,
                });
            }
            Opt::Algorithm => {
                let lit = lit_str(
                    input,
                    "an algorithm: \"gcra\", \"fixed_window\" or \"sliding_window\"",
                )?;
                let value = match lit.value().as_str() {
                    "gcra" => Algorithm::Gcra,
                    "fixed_window" => Algorithm::FixedWindow,
                    "sliding_window" => Algorithm::SlidingWindow,
                    other => {
                        return Err(syn::Error::new(
                            lit.span(),
                            format!(
                                "unknown algorithm {other:?}; expected \"gcra\" (the default), \"fixed_window\" or \"sliding_window\""
                            ),
                        ));
                    }
                };
                self.algorithm = Some(Located {
                    value,
                    span: lit.span(),
                });
            }
            Opt::Mode => {
                let lit = lit_str(input, "a mode: \"read\" or \"write\"")?;
                let value = match lit.value().as_str() {
                    "read" => Mode::Read,
                    "write" => Mode::Write,
                    other => {
                        return Err(syn::Error::new(
                            lit.span(),
                            format!(
                                "unknown mode {other:?}; expected \"read\" (shared with other readers) or \"write\" (alone)"
                            ),
                        ));
                    }
                };
                self.mode = Some(Located {
                    value,
                    span: lit.span(),
                });
            }
            Opt::Name => {
                let lit = lit_str(input, "the limiter's name, like \"login\"")?;
                if lit.value().is_empty() {
                    return Err(syn::Error::new(
                        lit.span(),
                        "the limiter's name must not be empty",
                    ));
                }
                self.name = Some(lit);
            }
        }
        Ok(())
    }

    /// Checks what no single option shows: required options, options that
    /// exclude each other.
    fn check(&self, kind: Kind) -> syn::Result<()> {
        if self.key.is_none() {
            return Err(syn::Error::new(
                Span::call_site(),
                format!(
                    "{} needs a `key`, like `key = \"order:{{order_id}}\"` (a key without placeholders is one key for every call)",
                    kind.attr()
                ),
            ));
        }
        if self.ttl.is_some() && self.watchdog.is_some() {
            let second = self
                .names
                .iter()
                .filter(|(o, _)| matches!(o, Opt::Ttl | Opt::Watchdog))
                .nth(1)
                .map_or_else(Span::call_site, |(_, span)| *span);
            return Err(syn::Error::new(
                second,
                "`ttl` and `watchdog` exclude each other: `ttl` is a fixed lease, `watchdog` a lease the watchdog renews",
            ));
        }
        if let (Some(at_least), Some(ttl)) = (&self.at_least, &self.ttl)
            && at_least.value > ttl.value
        {
            return Err(syn::Error::new(
                at_least.span,
                format!(
                    "`at_least` ({}) is longer than `ttl` ({}), the most the lock is kept",
                    shown(at_least.value),
                    shown(ttl.value)
                ),
            ));
        }
        match kind {
            Kind::Lock => {
                if self.mode.is_some() && self.at_least.is_some() {
                    return Err(syn::Error::new(
                        self.name_span(Opt::AtLeast),
                        "`at_least` does not apply to a read-write lock (`mode`): its holds end when the body ends",
                    ));
                }
            }
            Kind::ConcurrencyLimit => {
                if self.permits.is_none() {
                    return Err(syn::Error::new(
                        Span::call_site(),
                        "#[concurrency_limit] needs `permits`, the most bodies that may run at once, like `permits = 4`",
                    ));
                }
            }
            Kind::RateLimit => {
                let Some(rate) = &self.rate else {
                    return Err(syn::Error::new(
                        Span::call_site(),
                        "#[rate_limit] needs a `rate`, like `rate = \"10/s\"`",
                    ));
                };
                let algorithm = self.algorithm.map_or(Algorithm::Gcra, |a| a.value);
                if self.burst.is_some() && algorithm != Algorithm::Gcra {
                    return Err(syn::Error::new(
                        self.name_span(Opt::Burst),
                        "`burst` applies to the \"gcra\" algorithm only; the window algorithms admit exactly the rate's count per period",
                    ));
                }
                let limit = match (algorithm, &self.burst) {
                    (Algorithm::Gcra, Some(burst)) => burst.value,
                    _ => rate.value.count,
                };
                if algorithm == Algorithm::Gcra {
                    // lockguard's `Quota::validate`: GCRA tracks `T * burst`
                    // microseconds, exact only up to 2^53.
                    let period = rate.value.period.as_micros();
                    let count = u128::from(rate.value.count);
                    let t = period.div_ceil(count);
                    if t * u128::from(limit) > 1 << 53 {
                        let span = self.burst.as_ref().map_or(rate.span, |b| b.span);
                        return Err(syn::Error::new(
                            span,
                            "this rate and burst span more time than a rate limiter can track; lower the burst or shorten the period",
                        ));
                    }
                }
                if let Some(cost) = &self.cost
                    && cost.value > limit
                {
                    return Err(syn::Error::new(
                        cost.span,
                        format!(
                            "a cost of {} could never pass a limit of {limit} per call",
                            cost.value
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Args {
    /// The key. [`Args::parse`] has checked that it is there; the error
    /// only keeps this from ever being a panic.
    pub(crate) fn key(&self) -> syn::Result<&LitStr> {
        self.key.as_ref().ok_or_else(|| missing("key"))
    }

    /// The rate of a `#[rate_limit]` (checked by [`Args::parse`]).
    pub(crate) fn rate(&self) -> syn::Result<Rate> {
        self.rate.map(|r| r.value).ok_or_else(|| missing("rate"))
    }

    /// The permits of a `#[concurrency_limit]` (checked by [`Args::parse`]).
    pub(crate) fn permits(&self) -> syn::Result<u32> {
        self.permits
            .map(|p| p.value)
            .ok_or_else(|| missing("permits"))
    }

    fn name_span(&self, opt: Opt) -> Span {
        self.names
            .iter()
            .find(|(o, _)| *o == opt)
            .map_or_else(Span::call_site, |(_, span)| *span)
    }
}

fn missing(what: &str) -> syn::Error {
    syn::Error::new(Span::call_site(), format!("`{what}` is required"))
}

/// The error for a token that is no option of `kind`: named when it is an
/// identifier, else lookahead's "expected one of".
fn unknown_option(kind: Kind, input: ParseStream<'_>, la: Lookahead1<'_>) -> syn::Error {
    let fork = input.fork();
    match fork.call(Ident::parse_any) {
        Ok(ident) => {
            let known: Vec<_> = kind
                .options()
                .iter()
                .map(|o| format!("`{}`", o.name()))
                .collect();
            syn::Error::new(
                ident.span(),
                format!(
                    "unknown option `{ident}` for {}; expected one of {}",
                    kind.attr(),
                    known.join(", ")
                ),
            )
        }
        Err(_) => la.error(),
    }
}

/// A string literal, or an error naming what was expected.
fn lit_str(input: ParseStream<'_>, what: &str) -> syn::Result<LitStr> {
    if input.peek(LitStr) {
        input.parse()
    } else {
        Err(syn::Error::new(
            value_span(input),
            format!("expected a string literal: {what}"),
        ))
    }
}

/// A duration literal, like `"30s"`.
fn duration_value(input: ParseStream<'_>) -> syn::Result<Located<Duration>> {
    let lit = lit_str(input, DURATION_HELP)?;
    let value = duration::parse(&lit.value()).map_err(|e| syn::Error::new(lit.span(), e))?;
    Ok(Located {
        value,
        span: lit.span(),
    })
}

/// An integer literal between `min` and `max`.
fn int_value(input: ParseStream<'_>, what: &str, min: u64, max: u64) -> syn::Result<Located<u64>> {
    if !input.peek(LitInt) {
        return Err(syn::Error::new(
            value_span(input),
            format!("expected an integer literal for `{what}`, like `{what} = 4`"),
        ));
    }
    let lit: LitInt = input.parse()?;
    let value = lit
        .base10_parse::<u64>()
        .ok()
        .filter(|v| (min..=max).contains(v))
        .ok_or_else(|| {
            syn::Error::new(
                lit.span(),
                format!("`{what}` must be between {min} and {max}, got {lit}"),
            )
        })?;
    Ok(Located {
        value,
        span: lit.span(),
    })
}

/// A duration as users write it, for error messages.
fn shown(duration: Duration) -> String {
    duration::Text {
        duration,
        bare_unit: false,
    }
    .to_string()
}

/// Checks a lease against the bounds lockguard enforces.
fn check_lease(d: Located<Duration>, what: &str, min: Duration) -> syn::Result<()> {
    if d.value < min || d.value > MAX_LEASE {
        return Err(syn::Error::new(
            d.span,
            format!(
                "`{what}` must be between {} and {}, got {}",
                shown(min),
                shown(MAX_LEASE),
                shown(d.value)
            ),
        ));
    }
    Ok(())
}

/// The span of the next token (or of the end of input).
fn value_span(input: ParseStream<'_>) -> Span {
    input
        .cursor()
        .token_tree()
        .map_or_else(|| input.span(), |(tt, _)| tt.span())
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse::Parser;

    fn parse(kind: Kind, tokens: &str) -> syn::Result<Args> {
        let tokens: proc_macro2::TokenStream = tokens.parse().unwrap();
        (|input: ParseStream<'_>| Args::parse(kind, input)).parse2(tokens)
    }

    fn err(kind: Kind, tokens: &str) -> String {
        match parse(kind, tokens) {
            Ok(_) => panic!("{tokens} parsed"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn lock_options() {
        let a = parse(
            Kind::Lock,
            r#"key = "order:{id}", ttl = "30s", wait = "5s", skip_if_busy, client = self.locks, crate = "lg""#,
        )
        .unwrap();
        assert_eq!(a.key.unwrap().value(), "order:{id}");
        assert_eq!(a.ttl.unwrap().value, Duration::from_secs(30));
        assert_eq!(a.wait.unwrap().value, Duration::from_secs(5));
        assert!(a.skip_if_busy.is_some() && a.keep_going_on_lost.is_none());
        assert!(a.client.is_some());
        assert!(a.krate.unwrap().is_ident("lg"));
        assert!(a.mode.is_none());
        let a = parse(Kind::Lock, r#"key = "k", mode = "write", wait = "1s""#).unwrap();
        assert_eq!(a.mode.unwrap().value, Mode::Write);
        // A trailing comma is fine.
        assert!(parse(Kind::Lock, r#"key = "k","#).is_ok());
    }

    #[test]
    fn rate_limit_options() {
        let a = parse(
            Kind::RateLimit,
            r#"key = "user:{user.id}", rate = "10/s", burst = 20, algorithm = "gcra", name = "login", cost = 2"#,
        )
        .unwrap();
        assert_eq!(a.rate.unwrap().value.count, 10);
        assert_eq!(a.burst.unwrap().value, 20);
        assert_eq!(a.cost.unwrap().value, 2);
        assert_eq!(a.algorithm.unwrap().value, Algorithm::Gcra);
    }

    #[test]
    fn errors_name_the_option() {
        assert!(err(Kind::Lock, r#"key = "k", tll = "1s""#).contains("unknown option `tll`"));
        assert!(err(Kind::Lock, r#"key = "k", permits = 3"#).contains("unknown option `permits`"));
        assert!(err(Kind::Lock, r#"key = "k", key = "j""#).contains("duplicate option `key`"));
        assert!(err(Kind::Lock, r#"key = "k", ttl = "30""#).contains("has no unit"));
        assert!(err(Kind::Lock, r#"key = "k", ttl = 30"#).contains("expected a string literal"));
        assert!(err(Kind::Lock, r#"key = "k", ttl = "25h""#).contains("between 10ms and 1d"));
        assert!(err(Kind::Lock, r#"key = "k", watchdog = "50ms""#).contains("between 100ms"));
        assert!(err(Kind::Lock, r#"key = "k", ttl = "1s", watchdog = "1s""#).contains("exclude"));
        assert!(err(Kind::Lock, r#"key = "k", skip_if_busy = true"#).contains("flag"));
        assert!(err(Kind::Lock, r#"ttl = "1s""#).contains("needs a `key`"));
        assert!(err(Kind::RateLimit, r#"key = "k""#).contains("needs a `rate`"));
        assert!(err(Kind::RateLimit, r#"key = "k", rate = "10/sec""#).contains("invalid period"));
        assert!(
            err(
                Kind::RateLimit,
                r#"key = "k", rate = "10/s", algorithm = "fixed_window", burst = 3"#
            )
            .contains("gcra")
        );
        assert!(
            err(Kind::RateLimit, r#"key = "k", rate = "10/s", cost = 11"#).contains("never pass")
        );
        assert!(
            err(
                Kind::RateLimit,
                r#"key = "k", rate = "10/s", algorithm = "leaky""#
            )
            .contains("unknown algorithm")
        );
        assert!(err(Kind::ConcurrencyLimit, r#"key = "k""#).contains("needs `permits`"));
        assert!(err(Kind::ConcurrencyLimit, r#"key = "k", permits = 0"#).contains("between 1 and"));
        assert!(err(Kind::Lock, r#"key = "k", crate = "not a path""#).contains("not a crate path"));
        assert!(err(Kind::Lock, r#"key = "k", mode = "shared""#).contains("unknown mode"));
        assert!(err(Kind::Lock, r#"key = "k", mode = read"#).contains("expected a string literal"));
        assert!(
            err(Kind::Lock, r#"key = "k", mode = "read", at_least = "1s""#)
                .contains("does not apply to a read-write lock")
        );
        assert!(
            err(
                Kind::ConcurrencyLimit,
                r#"key = "k", permits = 2, mode = "read""#
            )
            .contains("unknown option `mode`")
        );
    }
}
