//! Code generation: the function, unchanged but for its body, which runs
//! as an `async move` block under the lock, the limit or the permit.

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::parse::{ParseStream, Parser};
use syn::spanned::Spanned;
use syn::{AttrStyle, Attribute, Ident, ItemFn, ReturnType};

use crate::attr::{Hold, Kind, Lease, LockKind, Mode, Options, RateAlgorithm};
use crate::shared::{client, error_type, millis, private_path};
use crate::template::{self, Scope};

/// Expands one attribute. Any error is reported with `compile_error!`
/// next to the function as written, so the rest of the crate (and the
/// IDE) still sees it.
pub(crate) fn attribute(kind: Kind, args: TokenStream, item: TokenStream) -> TokenStream {
    let func: ItemFn = match syn::parse2(item.clone()) {
        Ok(func) => func,
        Err(_) => {
            let e = syn::Error::new(
                Span::call_site(),
                format!("{} goes on an `async fn` with a body", kind.attr()),
            );
            return with_error(item, e);
        }
    };
    let options = (|input: ParseStream<'_>| Options::parse(kind, input)).parse2(args);
    match options.and_then(|options| expand(&options, &func)) {
        Ok(tokens) => tokens,
        Err(e) => with_error(item, e),
    }
}

/// The item as written, followed by the error.
fn with_error(mut item: TokenStream, e: syn::Error) -> TokenStream {
    item.extend(e.into_compile_error());
    item
}

fn expand(options: &Options, func: &ItemFn) -> syn::Result<TokenStream> {
    let kind = options.kind();
    let common = match options {
        Options::Lock(o) => &o.common,
        Options::RateLimit(o) => &o.common,
        Options::ConcurrencyLimit(o) => &o.common,
        Options::Scheduled(s) => return crate::scheduled::expand(s, func),
    };
    let sig = &func.sig;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span,
            format!(
                "{} works on `async fn` only: the lock, limit or permit is awaited before the body runs",
                kind.attr()
            ),
        ));
    }
    let ret_span = match &sig.output {
        ReturnType::Type(_, ty) => ty.span(),
        ReturnType::Default => {
            return Err(syn::Error::new(
                sig.ident.span(),
                format!(
                    "{} needs a function returning `Result<T, E>` where `E: From<lockguard::Error>`: when the body cannot run, the function returns `Err(e.into())`",
                    kind.attr()
                ),
            ));
        }
    };

    let p = private_path(common.krate.as_ref());
    let key = template::expand(&common.key, &Scope::of(sig), &p)?;
    let client = client(common.client.as_ref(), &p);
    let ms = |d: std::time::Duration| millis(d, &p);
    let opt_ms = |d: Option<std::time::Duration>| match d {
        Some(d) => {
            let d = ms(d);
            quote!(#p::Some(#d))
        }
        None => quote!(#p::None),
    };

    // Hygienic names: the body cannot see them, nor they the body.
    let client_var = Ident::new("__lockguard_client", Span::mixed_site());
    let key_var = Ident::new("__lockguard_key", Span::mixed_site());
    let body = Ident::new("__lockguard_body", Span::mixed_site());
    let out = Ident::new("__lockguard_out", Span::mixed_site());
    let err = Ident::new("__lockguard_err", Span::mixed_site());
    let block = &func.block;

    // The options of a lock's or permit's lease, as the facade takes them.
    let lease_options = |hold: &Hold, at_least: Option<std::time::Duration>| {
        let (ttl, watchdog) = match hold.lease {
            Lease::Default => (None, None),
            Lease::Fixed(ttl) => (Some(ttl), None),
            Lease::Watchdog(watchdog) => (None, Some(watchdog)),
        };
        let (ttl, watchdog) = (opt_ms(ttl), opt_ms(watchdog));
        let wait = opt_ms(hold.wait);
        let at_least = opt_ms(at_least);
        let stop_on_lost = hold.stop_on_lost;
        // The key's template names its metrics: one series for every key
        // it makes, not a series per id.
        let metric_name = common.key.value();
        quote! {
            #p::LeaseOptions {
                ttl: #ttl,
                watchdog: #watchdog,
                wait: #wait,
                at_least: #at_least,
                stop_on_lost: #stop_on_lost,
                metric_name: #metric_name,
            }
        }
    };

    let (call, skip_if_busy) = match options {
        Options::Lock(lock) => {
            let call = match lock.kind {
                LockKind::ReadWrite(mode) => {
                    let opts = lease_options(&lock.hold, None);
                    let mode = match mode {
                        Mode::Read => quote!(Read),
                        Mode::Write => quote!(Write),
                    };
                    quote!(#p::rw_locked(#client_var, #key_var, #p::RwMode::#mode, #opts, #body))
                }
                LockKind::Exclusive { at_least } => {
                    let opts = lease_options(&lock.hold, at_least);
                    quote!(#p::locked(#client_var, #key_var, #opts, #body))
                }
            };
            (call, lock.hold.skip_if_busy)
        }
        Options::ConcurrencyLimit(limit) => {
            let opts = lease_options(&limit.hold, None);
            let permits = limit.permits;
            let call = quote!(#p::limited(#client_var, #key_var, #permits, #opts, #body));
            (call, limit.hold.skip_if_busy)
        }
        Options::RateLimit(rate) => {
            let count = rate.rate.count;
            let period = ms(rate.rate.period);
            let (algorithm, burst) = match rate.algorithm {
                RateAlgorithm::Gcra { burst } => (quote!(Gcra), burst.map(|b| quote!(.burst(#b)))),
                RateAlgorithm::FixedWindow => (quote!(FixedWindow), None),
                RateAlgorithm::SlidingWindow => (quote!(SlidingWindow), None),
            };
            let cost = rate.cost;
            let shadow = rate.shadow;
            let name = match &rate.name {
                Some(name) => name.to_token_stream(),
                None => {
                    let ident = sig.ident.to_string();
                    quote!(#p::concat!(#p::module_path!(), "::", #ident))
                }
            };
            let call = quote! {
                #p::rate_limited(
                    {
                        // The call site's limiter, kept between its calls.
                        static SITE: #p::LimiterSite = #p::LimiterSite::new();
                        &SITE
                    },
                    #client_var,
                    #name,
                    #p::Quota::new(#count, #period) #burst,
                    #p::Algorithm::#algorithm,
                    #cost,
                    #shadow,
                    #key_var,
                    #body,
                )
            };
            (call, false)
        }
        Options::Scheduled(s) => return crate::scheduled::expand(s, func),
    };

    // A return type that cannot carry the error is reported on the
    // return type: every token of the call has its span.
    let p_ret = respan(p.clone(), ret_span);
    let skip = skip_if_busy.then(|| {
        let skipped = quote_spanned!(ret_span=> #p_ret::skipped());
        quote!(#p::Err(#err) if #err.is_busy() => #skipped,)
    });
    let fail = quote_spanned!(ret_span=> #p_ret::fail(#err));
    // A `Result<T, E>` written out: an `E` without `From<lockguard::Error>`
    // is explained on `E` (rustc alone names only the missing `From`).
    let check = error_type(&sig.output).map(|e| {
        let span = e.span();
        let p_err = respan(p.clone(), span);
        quote_spanned! {span=>
            {
                #[allow(unused_imports)]
                use #p_err::{CheckFallback as _, CheckFrom as _};
                #p_err::assert_error_from((&#p_err::ErrorCheck::<#e>::new()).verdict());
            }
        }
    });

    // syn hands a body's inner attributes (`#![allow(...)]`) over with the
    // function's: they go back at the top of the body.
    let (inner, outer): (Vec<&Attribute>, Vec<&Attribute>) = func
        .attrs
        .iter()
        .partition(|a| matches!(a.style, AttrStyle::Inner(_)));
    let vis = &func.vis;
    Ok(quote! {
        #(#outer)*
        #vis #sig {
            #(#inner)*
            #check
            // The client and the key borrow the arguments; the body then
            // takes them.
            let #client_var = #client;
            let #key_var = #key;
            let #body = async move #block;
            match #call.await {
                #p::Ok(#out) => #out,
                #skip
                #p::Err(#err) => #fail,
            }
        }
    })
}

/// `tokens` with every span set to `span`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tt| {
            if let TokenTree::Group(g) = &tt {
                let mut group = Group::new(g.delimiter(), respan(g.stream(), span));
                group.set_span(span);
                tt = TokenTree::Group(group);
            } else {
                tt.set_span(span);
            }
            tt
        })
        .collect()
}
