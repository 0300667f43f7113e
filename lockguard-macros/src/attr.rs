//! The arguments of the three attributes: parsed with custom keywords and
//! lookahead, every error spanned on the option or value at fault, then
//! built into one type per attribute ([`LockOptions`], [`RateOptions`],
//! [`PermitOptions`]) whose construction proves what the expansion needs:
//! the required options are there, the options that exclude each other
//! are not both there, every value is one lockguard accepts.

use std::time::Duration;

use lockguard_units::duration::{self, DURATION_HELP};
use lockguard_units::{MAX_LEASE, MAX_PERMITS, MAX_QUOTA, MIN_LEASE, MIN_WATCHDOG_LEASE};
use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Lookahead1, ParseStream};
use syn::{Expr, Ident, LitInt, LitStr, Path, Token};

use crate::rate::{self, Rate};

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
    syn::custom_keyword!(shadow);
    syn::custom_keyword!(every);
    syn::custom_keyword!(at_most);
}

/// Which attribute is being expanded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Lock,
    RateLimit,
    ConcurrencyLimit,
    Scheduled,
}

impl Kind {
    /// The attribute as users write it, for messages.
    pub(crate) fn attr(self) -> &'static str {
        match self {
            Self::Lock => "#[distributed_lock]",
            Self::RateLimit => "#[rate_limit]",
            Self::ConcurrencyLimit => "#[concurrency_limit]",
            Self::Scheduled => "#[scheduled]",
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
            Self::RateLimit => &[
                Key, Rate, Burst, Algorithm, Name, Cost, Shadow, Client, Crate,
            ],
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
            Self::Scheduled => &[Every, AtLeast, AtMost, Name, Client, Crate],
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
    Shadow,
    Every,
    AtMost,
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
            Self::Shadow => "shadow",
            Self::Every => "every",
            Self::AtMost => "at_most",
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
            Self::Shadow => la.peek(kw::shadow),
            Self::Every => la.peek(kw::every),
            Self::AtMost => la.peek(kw::at_most),
        }
    }

    fn is_flag(self) -> bool {
        matches!(
            self,
            Self::SkipIfBusy | Self::KeepGoingOnLost | Self::Shadow
        )
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

/// What every attribute takes.
pub(crate) struct Common {
    /// The key template, like `"order:{order_id}"`.
    pub(crate) key: LitStr,
    /// `client = <expr>`; `None`: the process-wide default client.
    pub(crate) client: Option<Expr>,
    /// `crate = "path"`; `None`: `::lockguard`.
    pub(crate) krate: Option<Path>,
}

/// How a lock's or permit's lease is kept: `ttl` and `watchdog` exclude
/// each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lease {
    /// The client's default.
    Default,
    /// `ttl`: a fixed lease.
    Fixed(Duration),
    /// `watchdog`: a lease the watchdog renews.
    Watchdog(Duration),
}

/// What a lock and a concurrency limit share: how the hold is taken and
/// kept.
pub(crate) struct Hold {
    pub(crate) lease: Lease,
    /// `wait`; `None`: one attempt.
    pub(crate) wait: Option<Duration>,
    /// `skip_if_busy`: `Ok(None)` when busy.
    pub(crate) skip_if_busy: bool,
    /// Not `keep_going_on_lost`: the body stops when the lease is lost.
    pub(crate) stop_on_lost: bool,
}

/// The kind of lock of a `#[distributed_lock]`: `at_least` only applies
/// to an exclusive one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockKind {
    /// One holder; `at_least` keeps the lock that long after it was taken,
    /// no longer than a fixed lease.
    Exclusive { at_least: Option<Duration> },
    /// `mode`: a read or write hold of a read-write lock.
    ReadWrite(Mode),
}

/// The options of a `#[distributed_lock]`.
pub(crate) struct LockOptions {
    pub(crate) common: Common,
    pub(crate) hold: Hold,
    pub(crate) kind: LockKind,
}

/// The options of a `#[concurrency_limit]`.
pub(crate) struct PermitOptions {
    pub(crate) common: Common,
    pub(crate) hold: Hold,
    /// Between 1 and `MAX_PERMITS`.
    pub(crate) permits: u32,
}

/// The limiter's algorithm, with GCRA's burst: `burst` applies to GCRA
/// only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RateAlgorithm {
    Gcra { burst: Option<u64> },
    FixedWindow,
    SlidingWindow,
}

/// The options of a `#[rate_limit]`: a quota lockguard accepts, and a cost
/// it can pass.
pub(crate) struct RateOptions {
    pub(crate) common: Common,
    pub(crate) rate: Rate,
    pub(crate) algorithm: RateAlgorithm,
    /// `name`, not empty; `None`: the function's path.
    pub(crate) name: Option<LitStr>,
    /// Between 1 and the limit per call (the burst or the rate's count).
    pub(crate) cost: u64,
    /// `shadow`: decide and record, never refuse.
    pub(crate) shadow: bool,
}

/// The options of a `#[scheduled]`: a period `lockguard::Schedule`
/// accepts, with its bounds.
pub(crate) struct ScheduleOptions {
    /// At least 1 ms.
    pub(crate) every: Duration,
    /// Shorter than the period, at most `at_most`.
    pub(crate) at_least: Option<Duration>,
    /// A lease lockguard accepts.
    pub(crate) at_most: Option<Duration>,
    /// `name`, not empty; `None`: the function's path.
    pub(crate) name: Option<LitStr>,
    /// `client = <expr>`; `None`: the process-wide default client.
    pub(crate) client: Option<Expr>,
    /// `crate = "path"`; `None`: `::lockguard`.
    pub(crate) krate: Option<Path>,
}

/// The options of one attribute, as its expansion needs them.
pub(crate) enum Options {
    Lock(LockOptions),
    RateLimit(RateOptions),
    ConcurrencyLimit(PermitOptions),
    Scheduled(ScheduleOptions),
}

impl Options {
    /// Parses the arguments of `kind`'s attribute, and checks them
    /// together.
    pub(crate) fn parse(kind: Kind, input: ParseStream<'_>) -> syn::Result<Self> {
        Written::parse(kind, input)?.build(kind)
    }

    /// Which attribute these are the options of.
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Self::Lock(_) => Kind::Lock,
            Self::RateLimit(_) => Kind::RateLimit,
            Self::ConcurrencyLimit(_) => Kind::ConcurrencyLimit,
            Self::Scheduled(_) => Kind::Scheduled,
        }
    }
}

/// The options as written, each checked on its own: what [`Options`] is
/// built from.
#[derive(Default)]
struct Written {
    key: Option<LitStr>,
    ttl: Option<Located<Duration>>,
    watchdog: Option<Located<Duration>>,
    wait: Option<Located<Duration>>,
    at_least: Option<Located<Duration>>,
    skip_if_busy: bool,
    keep_going_on_lost: bool,
    shadow: bool,
    client: Option<Expr>,
    krate: Option<Path>,
    rate: Option<Located<Rate>>,
    burst: Option<Located<u64>>,
    algorithm: Option<Located<Algorithm>>,
    name: Option<LitStr>,
    cost: Option<Located<u64>>,
    permits: Option<Located<u32>>,
    mode: Option<Located<Mode>>,
    every: Option<Located<Duration>>,
    at_most: Option<Located<Duration>>,
    /// Where each option's name was written, for errors about options
    /// that exclude each other.
    names: Vec<(Opt, Span)>,
}

impl Written {
    /// Parses the arguments of `kind`'s attribute.
    fn parse(kind: Kind, input: ParseStream<'_>) -> syn::Result<Self> {
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
            args.parse_value(opt, input)?;
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(args)
    }

    fn parse_value(&mut self, opt: Opt, input: ParseStream<'_>) -> syn::Result<()> {
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
            Opt::SkipIfBusy => self.skip_if_busy = true,
            Opt::KeepGoingOnLost => self.keep_going_on_lost = true,
            Opt::Shadow => self.shadow = true,
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
                let n = int_value(input, "permits", 1, u64::from(MAX_PERMITS))?;
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
                let lit = lit_str(input, "a name, like \"login\" or \"nightly-report\"")?;
                if lit.value().is_empty() {
                    return Err(syn::Error::new(lit.span(), "the name must not be empty"));
                }
                self.name = Some(lit);
            }
            Opt::Every => {
                let d = duration_value(input)?;
                if d.value < Duration::from_millis(1) {
                    return Err(syn::Error::new(
                        d.span,
                        format!("`every` must be at least 1ms, got {}", shown(d.value)),
                    ));
                }
                self.every = Some(d);
            }
            Opt::AtMost => {
                let d = duration_value(input)?;
                check_lease(d, "at_most", MIN_LEASE)?;
                self.at_most = Some(d);
            }
        }
        Ok(())
    }

    /// Checks what no single option shows (required options, options that
    /// exclude each other) and builds `kind`'s options.
    fn build(self, kind: Kind) -> syn::Result<Options> {
        if kind == Kind::Scheduled {
            return self.build_scheduled().map(Options::Scheduled);
        }
        let Some(key) = self.key.clone() else {
            return Err(syn::Error::new(
                Span::call_site(),
                format!(
                    "{} needs a `key`, like `key = \"order:{{order_id}}\"` (a key without placeholders is one key for every call)",
                    kind.attr()
                ),
            ));
        };
        let lease = match (self.ttl, self.watchdog) {
            (Some(_), Some(_)) => {
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
            (Some(ttl), None) => Lease::Fixed(ttl.value),
            (None, Some(watchdog)) => Lease::Watchdog(watchdog.value),
            (None, None) => Lease::Default,
        };
        if let (Some(at_least), Lease::Fixed(ttl)) = (&self.at_least, lease)
            && at_least.value > ttl
        {
            return Err(syn::Error::new(
                at_least.span,
                format!(
                    "`at_least` ({}) is longer than `ttl` ({}), the most the lock is kept",
                    shown(at_least.value),
                    shown(ttl)
                ),
            ));
        }
        let hold = Hold {
            lease,
            wait: self.wait.map(|w| w.value),
            skip_if_busy: self.skip_if_busy,
            stop_on_lost: !self.keep_going_on_lost,
        };
        let common = Common {
            key,
            client: self.client.clone(),
            krate: self.krate.clone(),
        };
        match kind {
            Kind::Lock => {
                let kind = match (self.mode, self.at_least) {
                    (Some(_), Some(_)) => {
                        return Err(syn::Error::new(
                            self.name_span(Opt::AtLeast),
                            "`at_least` does not apply to a read-write lock (`mode`): its holds end when the body ends",
                        ));
                    }
                    (Some(mode), None) => LockKind::ReadWrite(mode.value),
                    (None, at_least) => LockKind::Exclusive {
                        at_least: at_least.map(|a| a.value),
                    },
                };
                Ok(Options::Lock(LockOptions { common, hold, kind }))
            }
            Kind::ConcurrencyLimit => {
                let Some(permits) = self.permits else {
                    return Err(syn::Error::new(
                        Span::call_site(),
                        "#[concurrency_limit] needs `permits`, the most bodies that may run at once, like `permits = 4`",
                    ));
                };
                Ok(Options::ConcurrencyLimit(PermitOptions {
                    common,
                    hold,
                    permits: permits.value,
                }))
            }
            Kind::RateLimit => self.build_rate(common).map(Options::RateLimit),
            Kind::Scheduled => self.build_scheduled().map(Options::Scheduled),
        }
    }

    /// The options of a `#[rate_limit]`: a quota the limiter accepts
    /// (`lockguard::Quota::validate`), a cost it can pass.
    fn build_rate(&self, common: Common) -> syn::Result<RateOptions> {
        let Some(rate) = &self.rate else {
            return Err(syn::Error::new(
                Span::call_site(),
                "#[rate_limit] needs a `rate`, like `rate = \"10/s\"`",
            ));
        };
        let algorithm = match self.algorithm.map_or(Algorithm::Gcra, |a| a.value) {
            Algorithm::Gcra => RateAlgorithm::Gcra {
                burst: self.burst.map(|b| b.value),
            },
            _ if self.burst.is_some() => {
                return Err(syn::Error::new(
                    self.name_span(Opt::Burst),
                    "`burst` applies to the \"gcra\" algorithm only; the window algorithms admit exactly the rate's count per period",
                ));
            }
            Algorithm::FixedWindow => RateAlgorithm::FixedWindow,
            Algorithm::SlidingWindow => RateAlgorithm::SlidingWindow,
        };
        let limit = match algorithm {
            RateAlgorithm::Gcra { burst: Some(burst) } => burst,
            _ => rate.value.count,
        };
        if let RateAlgorithm::Gcra { burst } = algorithm
            && lockguard_units::check_quota(rate.value.count, rate.value.period, burst).is_err()
        {
            // The rate and the burst are each within bounds already: what
            // is left is the span GCRA tracks.
            let span = self.burst.as_ref().map_or(rate.span, |b| b.span);
            return Err(syn::Error::new(
                span,
                "this rate and burst span more time than a rate limiter can track; lower the burst or shorten the period",
            ));
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
        Ok(RateOptions {
            common,
            rate: rate.value,
            algorithm,
            name: self.name.clone(),
            cost: self.cost.map_or(1, |c| c.value),
            shadow: self.shadow,
        })
    }

    /// The options of a `#[scheduled]`: a period, and bounds that fit it.
    fn build_scheduled(&self) -> syn::Result<ScheduleOptions> {
        let Some(every) = self.every else {
            return Err(syn::Error::new(
                Span::call_site(),
                "#[scheduled] needs `every`, the period, like `every = \"1h\"`",
            ));
        };
        let at_most = self.at_most.map_or(every.value, |a| a.value);
        if let Some(at_least) = self.at_least {
            if at_least.value >= every.value {
                return Err(syn::Error::new(
                    at_least.span,
                    format!(
                        "`at_least` ({}) must be shorter than the period ({}), or the lock kept from one period would make the next skip",
                        shown(at_least.value),
                        shown(every.value)
                    ),
                ));
            }
            if at_least.value > at_most {
                return Err(syn::Error::new(
                    at_least.span,
                    format!(
                        "`at_least` ({}) is longer than `at_most` ({}), the most the lock is kept",
                        shown(at_least.value),
                        shown(at_most)
                    ),
                ));
            }
        }
        Ok(ScheduleOptions {
            every: every.value,
            at_least: self.at_least.map(|a| a.value),
            at_most: self.at_most.map(|a| a.value),
            name: self.name.clone(),
            client: self.client.clone(),
            krate: self.krate.clone(),
        })
    }

    fn name_span(&self, opt: Opt) -> Span {
        self.names
            .iter()
            .find(|(o, _)| *o == opt)
            .map_or_else(Span::call_site, |(_, span)| *span)
    }
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

    fn parse(kind: Kind, tokens: &str) -> syn::Result<Options> {
        let tokens: proc_macro2::TokenStream = tokens.parse().unwrap();
        (|input: ParseStream<'_>| Options::parse(kind, input)).parse2(tokens)
    }

    fn err(kind: Kind, tokens: &str) -> String {
        match parse(kind, tokens) {
            Ok(_) => panic!("{tokens} parsed"),
            Err(e) => e.to_string(),
        }
    }

    fn lock(tokens: &str) -> LockOptions {
        match parse(Kind::Lock, tokens).unwrap() {
            Options::Lock(o) => o,
            _ => panic!("not a lock's options"),
        }
    }

    #[test]
    fn lock_options() {
        let a = lock(
            r#"key = "order:{id}", ttl = "30s", wait = "5s", skip_if_busy, client = self.locks, crate = "lg""#,
        );
        assert_eq!(a.common.key.value(), "order:{id}");
        assert_eq!(a.hold.lease, Lease::Fixed(Duration::from_secs(30)));
        assert_eq!(a.hold.wait, Some(Duration::from_secs(5)));
        assert!(a.hold.skip_if_busy && a.hold.stop_on_lost);
        assert!(a.common.client.is_some());
        assert!(a.common.krate.unwrap().is_ident("lg"));
        assert_eq!(a.kind, LockKind::Exclusive { at_least: None });
        let a = lock(r#"key = "k", mode = "write", wait = "1s""#);
        assert_eq!(a.kind, LockKind::ReadWrite(Mode::Write));
        let a = lock(r#"key = "k", watchdog = "1s", keep_going_on_lost"#);
        assert_eq!(a.hold.lease, Lease::Watchdog(Duration::from_secs(1)));
        assert!(!a.hold.stop_on_lost);
        // A trailing comma is fine.
        assert!(parse(Kind::Lock, r#"key = "k","#).is_ok());
    }

    #[test]
    fn rate_limit_options() {
        let Options::RateLimit(a) = parse(
            Kind::RateLimit,
            r#"key = "user:{user.id}", rate = "10/s", burst = 20, algorithm = "gcra", name = "login", cost = 2"#,
        )
        .unwrap() else {
            panic!("not a rate limit's options");
        };
        assert_eq!(a.rate.count, 10);
        assert_eq!(a.algorithm, RateAlgorithm::Gcra { burst: Some(20) });
        assert_eq!(a.cost, 2);
        assert_eq!(a.name.unwrap().value(), "login");
        let Options::ConcurrencyLimit(p) =
            parse(Kind::ConcurrencyLimit, r#"key = "k", permits = 3"#).unwrap()
        else {
            panic!("not a concurrency limit's options");
        };
        assert_eq!(p.permits, 3);
        assert_eq!(p.hold.lease, Lease::Default);
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
