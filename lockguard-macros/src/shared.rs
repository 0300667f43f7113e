//! What the expansions share: the facade's path, the client a call runs
//! on, durations as tokens, the error type of a `Result`.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, GenericArgument, PathArguments, ReturnType, Type};

/// The path of the facade's `__private` module: under `crate = "..."`,
/// or `::lockguard`.
pub(crate) fn private_path(krate: Option<&syn::Path>) -> TokenStream {
    let krate = match krate {
        Some(path) => path.to_token_stream(),
        None => quote!(::lockguard),
    };
    quote!(#krate::__private)
}

/// The client a call runs on, a `Result<Client>`: `client = <expr>`'s, or
/// the process-wide default.
pub(crate) fn client(expr: Option<&Expr>, p: &TokenStream) -> TokenStream {
    match expr {
        Some(expr) => {
            // A type error points at the whole expression: the `&` takes
            // its first token's span, and parentheses (whose span would
            // end the expression there) are added only where precedence
            // needs them.
            let amp = quote_spanned!(expr.span()=> &);
            let simple = matches!(
                expr,
                Expr::Path(_)
                    | Expr::Field(_)
                    | Expr::MethodCall(_)
                    | Expr::Call(_)
                    | Expr::Index(_)
                    | Expr::Paren(_)
                    | Expr::Macro(_)
            );
            if simple {
                quote!(#p::client(#amp #expr))
            } else {
                quote!(#p::client(#amp (#expr)))
            }
        }
        None => quote!(#p::default_client()),
    }
}

/// `d` as a `Duration` expression, in whole milliseconds.
pub(crate) fn millis(d: std::time::Duration, p: &TokenStream) -> TokenStream {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    quote!(#p::Duration::from_millis(#ms))
}

/// `E` of a return type written `Result<T, E>` (any path ending in
/// `Result` with two type arguments); `None` for any other, such as an
/// alias with one argument.
pub(crate) fn error_type(output: &ReturnType) -> Option<&Type> {
    let ReturnType::Type(_, ty) = output else {
        return None;
    };
    let Type::Path(path) = &**ty else {
        return None;
    };
    let last = path.path.segments.last()?;
    if last.ident != "Result" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    let mut types = args.args.iter().filter_map(|a| match a {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    });
    match (types.next(), types.next(), types.next()) {
        (Some(_), Some(e), None) => Some(e),
        _ => None,
    }
}
