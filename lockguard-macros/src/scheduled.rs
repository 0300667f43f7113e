//! Code generation of `#[scheduled]`: the `async fn` (the job) becomes a
//! plain `fn` of the same name that starts its schedule
//! (`Client::schedule`) and returns the `Scheduled` handle. Its arguments
//! but a `JobRun` stay the function's; each run gets clones of them.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{AttrStyle, Attribute, FnArg, Ident, ItemFn, Pat, ReturnType, Type};

use crate::attr::ScheduleOptions;
use crate::shared::{client, error_type, millis, private_path};

/// One argument the starter keeps: cloned into the schedule, and into
/// each run; a reference argument is a reference again inside the body.
struct Kept<'a> {
    ident: &'a Ident,
    by_ref: bool,
}

pub(crate) fn expand(options: &ScheduleOptions, func: &ItemFn) -> syn::Result<TokenStream> {
    let sig = &func.sig;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span,
            "#[scheduled] goes on an `async fn`: the job each period runs",
        ));
    }
    let ret = match &sig.output {
        ReturnType::Type(_, ty) if error_type(&sig.output).is_some() => ty,
        _ => {
            return Err(syn::Error::new(
                match &sig.output {
                    ReturnType::Type(_, ty) => ty.span(),
                    ReturnType::Default => sig.ident.span(),
                },
                "#[scheduled] needs a job returning `Result<T, E>` where `E: Display`: a run's error is logged, and the next period runs as usual",
            ));
        }
    };
    let mut run: Option<(&Pat, &Type)> = None;
    let mut kept = Vec::new();
    let mut params = Vec::new();
    for arg in &sig.inputs {
        let FnArg::Typed(arg) = arg else {
            return Err(syn::Error::new(
                arg.span(),
                "#[scheduled] goes on a free function: a method's `self` cannot be kept across runs; pass what the job needs as arguments",
            ));
        };
        if is_job_run(&arg.ty) {
            if run.is_some() {
                return Err(syn::Error::new(arg.span(), "a job takes one `JobRun`"));
            }
            run = Some((&arg.pat, &arg.ty));
            continue;
        }
        let Pat::Ident(pat) = &*arg.pat else {
            return Err(syn::Error::new(
                arg.pat.span(),
                "#[scheduled] needs a plain name for each argument: each run gets a clone of it",
            ));
        };
        kept.push(Kept {
            ident: &pat.ident,
            by_ref: matches!(&*arg.ty, Type::Reference(_)),
        });
        params.push(arg);
    }

    let p = private_path(options.krate.as_ref());
    let client = client(options.client.as_ref(), &p);
    let every = millis(options.every, &p);
    let at_least = options.at_least.map(|d| {
        let d = millis(d, &p);
        quote!(.at_least(#d))
    });
    let at_most = options.at_most.map(|d| {
        let d = millis(d, &p);
        quote!(.at_most(#d))
    });
    let name = match &options.name {
        Some(name) => quote!(#name),
        None => {
            let ident = sig.ident.to_string();
            quote!(#p::concat!(#p::module_path!(), "::", #ident))
        }
    };
    // The run's type as written, so that an import of it is used.
    let run = match run {
        Some((pat, ty)) => quote!(#pat: #ty),
        None => quote!(_: #p::JobRun),
    };
    let owned: Vec<TokenStream> = kept
        .iter()
        .map(|k| {
            let ident = k.ident;
            if k.by_ref {
                quote!(let #ident = #p::Clone::clone(#ident);)
            } else {
                quote!(let #ident = #p::Clone::clone(&#ident);)
            }
        })
        .collect();
    let per_run: Vec<TokenStream> = kept
        .iter()
        .map(|k| {
            let ident = k.ident;
            quote!(let #ident = #p::Clone::clone(&#ident);)
        })
        .collect();
    let borrowed: Vec<TokenStream> = kept
        .iter()
        .filter(|k| k.by_ref)
        .map(|k| {
            let ident = k.ident;
            quote!(let #ident = &#ident;)
        })
        .collect();

    let (inner, outer): (Vec<&Attribute>, Vec<&Attribute>) = func
        .attrs
        .iter()
        .partition(|a| matches!(a.style, AttrStyle::Inner(_)));
    let vis = &func.vis;
    let ident = &sig.ident;
    let (generics, _, where_clause) = sig.generics.split_for_impl();
    let block = &func.block;
    let client_var = Ident::new("__lockguard_client", Span::mixed_site());
    let out = Ident::new("__lockguard_out", Span::mixed_site());
    let scheduled = quote_spanned!(sig.ident.span()=> #p::Result<#p::Scheduled>);
    Ok(quote! {
        #(#outer)*
        #vis fn #ident #generics (#(#params),*) -> #scheduled #where_clause {
            #(#inner)*
            let #client_var = #client?;
            #(#owned)*
            #client_var.schedule(
                #name,
                #p::Schedule::every(#every) #at_least #at_most,
                move |#run| {
                    #(#per_run)*
                    async move {
                        #(#borrowed)*
                        let #out: #ret = #block;
                        #out
                    }
                },
            )
        }
    })
}

/// Whether `ty` names `JobRun` (any path ending in it).
fn is_job_run(ty: &Type) -> bool {
    matches!(ty, Type::Path(path) if path.path.segments.last().is_some_and(|s| s.ident == "JobRun"))
}
