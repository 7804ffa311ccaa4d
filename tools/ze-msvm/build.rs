//! Generates the Level Zero bindings (`sys.rs`) and the DDI-table glue
//! (`stubs.rs`) in `OUT_DIR`.
//!
//! `stubs.rs` is derived from the bindings, so that every signature in it is
//! the header's own:
//!
//! - `stub_<pfn>`: for every function-pointer typedef used by a DDI table
//!   (`ze_pfnInit_t` gives `stub_ze_pfnInit`), a function with exactly that
//!   signature that returns `ZE_RESULT_ERROR_UNSUPPORTED_FEATURE`;
//! - `stubbed_<table>`: for every table (`_ze_global_dditable_t` gives
//!   `stubbed_ze_global`), the table with every entry set to its stub;
//! - for every table getter (`zeGetGlobalProcAddrTable`, ...), an exported
//!   function of the same name and signature that writes
//!   `crate::ddi::fill_<table>(stubbed_<table>())` through
//!   `crate::ddi::write_table`.

use std::collections::{BTreeMap, BTreeSet};
use std::env;
use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{Ident, Span, TokenStream};
use quote::quote;
use syn::{FnArg, ForeignItem, Item, ReturnType, Type};

/// Where Debian's libclang lives, used when `LIBCLANG_PATH` is unset.
const DEFAULT_LIBCLANG_PATH: &str = "/usr/lib/llvm-22/lib";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-env-changed=LIBCLANG_PATH");
    // Installed as libze_msvm.so.1, as Level Zero drivers are (libze_intel_gpu.so.1).
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libze_msvm.so.1");
    // The loader unloads its drivers at exit, while a queue's thread may
    // still run: the library stays mapped.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");

    // tools/.cargo/config.toml links the guest tools statically, and rustc
    // then drops the cdylib (with a mere warning).
    let features = env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    assert!(
        !features.split(',').any(|f| f == "crt-static"),
        "ze-msvm is a shared library: build it with an empty RUSTFLAGS \
         (`RUSTFLAGS= cargo build --release`), which overrides \
         tools/.cargo/config.toml's +crt-static"
    );

    if env::var_os("LIBCLANG_PATH").is_none() && Path::new(DEFAULT_LIBCLANG_PATH).is_dir() {
        // Build scripts are single-threaded here: nothing else reads the
        // environment concurrently.
        env::set_var("LIBCLANG_PATH", DEFAULT_LIBCLANG_PATH);
    }

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .rust_target(bindgen::RustTarget::stable(85, 0).expect("a known Rust version"))
        .allowlist_item("_?(ze|ZE).*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .expect("bindgen failed on the Level Zero headers");
    let sys = bindings.to_string();
    fs::write(out_dir.join("sys.rs"), &sys).expect("write sys.rs");

    let file = syn::parse_file(&sys).expect("bindgen output parses");
    let stubs = generate_stubs(&file);
    fs::write(out_dir.join("stubs.rs"), stubs).expect("write stubs.rs");
}

/// A DDI table struct: `_ze_global_dditable_t` is table `ze_global`.
struct Table {
    name: String,
    struct_ident: Ident,
    /// (field, pfn typedef) in declaration order.
    fields: Vec<(Ident, Ident)>,
}

fn ident(s: &str) -> Ident {
    Ident::new(s, Span::call_site())
}

/// `_ze_global_dditable_t` -> `ze_global`; `None` for other names (and for
/// the aggregates `_ze_dditable_t`, `_zet_dditable_t`, `_zes_dditable_t`).
fn table_name(struct_name: &str) -> Option<String> {
    let inner = struct_name.strip_prefix('_')?.strip_suffix("_dditable_t")?;
    let (api, rest) = inner.split_once('_')?;
    (matches!(api, "ze" | "zet" | "zes") && !rest.is_empty()).then(|| inner.to_string())
}

/// `zeGetGlobalProcAddrTable`, `zetGetMetricGroupExpProcAddrTable`, ...
fn is_getter(name: &str) -> bool {
    ["zeGet", "zetGet", "zesGet"]
        .iter()
        .any(|p| name.starts_with(p))
        && name.contains("ProcAddrTable")
}

/// The last path segment of a plain path type (`ze_result_t`, `Option`).
fn path_ident(ty: &Type) -> Option<&syn::PathSegment> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        _ => None,
    }
}

/// `Option<unsafe extern "C" fn(...) -> R>` -> the bare fn.
fn option_fn(ty: &Type) -> Option<&syn::TypeBareFn> {
    let seg = path_ident(ty)?;
    if seg.ident != "Option" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &seg.arguments else {
        return None;
    };
    match args.args.first()? {
        syn::GenericArgument::Type(Type::BareFn(f)) => Some(f),
        _ => None,
    }
}

fn generate_stubs(file: &syn::File) -> String {
    let mut aliases: BTreeMap<String, Type> = BTreeMap::new();
    let mut tables: Vec<Table> = Vec::new();
    let mut getters: Vec<syn::ForeignItemFn> = Vec::new();

    for item in &file.items {
        match item {
            Item::Type(t) => {
                aliases.insert(t.ident.to_string(), (*t.ty).clone());
            }
            Item::Struct(s) => {
                let Some(name) = table_name(&s.ident.to_string()) else {
                    continue;
                };
                let fields = s
                    .fields
                    .iter()
                    .map(|f| {
                        let field = f.ident.clone().expect("named field");
                        let pfn = path_ident(&f.ty)
                            .unwrap_or_else(|| panic!("{}.{field}: not a pfn typedef", s.ident));
                        (field, pfn.ident.clone())
                    })
                    .collect();
                tables.push(Table {
                    name,
                    struct_ident: s.ident.clone(),
                    fields,
                });
            }
            Item::ForeignMod(m) => {
                for fi in &m.items {
                    if let ForeignItem::Fn(f) = fi {
                        if is_getter(&f.sig.ident.to_string()) {
                            getters.push(f.clone());
                        }
                    }
                }
            }
            _ => {}
        }
    }

    // One typed stub per pfn typedef that some table uses.
    let pfns: BTreeSet<Ident> = tables
        .iter()
        .flat_map(|t| t.fields.iter().map(|(_, pfn)| pfn.clone()))
        .collect();
    let mut out = TokenStream::new();
    for pfn in &pfns {
        let ty = aliases
            .get(&pfn.to_string())
            .unwrap_or_else(|| panic!("no typedef {pfn}"));
        let f = option_fn(ty).unwrap_or_else(|| panic!("{pfn} is not Option<fn>"));
        assert!(f.variadic.is_none(), "{pfn} is variadic");
        match &f.output {
            ReturnType::Type(_, r) if path_ident(r).is_some_and(|s| s.ident == "ze_result_t") => {}
            _ => panic!("{pfn} does not return ze_result_t"),
        }
        let args = f.inputs.iter().map(|a| &a.ty);
        let output = &f.output;
        let stub = stub_ident(pfn);
        out.extend(quote! {
            unsafe extern "C" fn #stub(#(_: #args),*) #output {
                ZE_RESULT_ERROR_UNSUPPORTED_FEATURE
            }
        });
    }

    for t in &tables {
        let stubbed = ident(&format!("stubbed_{}", t.name));
        let st = &t.struct_ident;
        let fields = t.fields.iter().map(|(field, pfn)| {
            let stub = stub_ident(pfn);
            quote! { #field: Some(#stub) }
        });
        out.extend(quote! {
            pub(crate) fn #stubbed() -> #st {
                #st { #(#fields),* }
            }
        });
    }

    // Getters: resolve the table argument's type to its struct.
    let by_struct: BTreeMap<String, &Table> = tables
        .iter()
        .map(|t| (t.struct_ident.to_string(), t))
        .collect();
    let mut seen = BTreeSet::new();
    for g in &getters {
        let name = &g.sig.ident;
        let inputs: Vec<&syn::PatType> = g
            .sig
            .inputs
            .iter()
            .map(|a| match a {
                FnArg::Typed(p) => p,
                FnArg::Receiver(_) => unreachable!(),
            })
            .collect();
        assert_eq!(inputs.len(), 2, "{name}: expected (version, table)");
        let (version, table) = (&inputs[0].pat, &inputs[1].pat);
        let Type::Ptr(ptr) = &*inputs[1].ty else {
            panic!("{name}: table argument is not a pointer");
        };
        let mut tname = path_ident(&ptr.elem)
            .unwrap_or_else(|| panic!("{name}: table type"))
            .ident
            .to_string();
        // Follow typedefs (ze_global_dditable_t = _ze_global_dditable_t).
        while let Some(seg) = aliases.get(&tname).and_then(path_ident) {
            tname = seg.ident.to_string();
        }
        let t = by_struct
            .get(&tname)
            .unwrap_or_else(|| panic!("{name}: {tname} is not a DDI table"));
        assert!(seen.insert(t.name.clone()), "two getters for {}", t.name);
        let stubbed = ident(&format!("stubbed_{}", t.name));
        let fill = ident(&format!("fill_{}", t.name));
        let inputs = &g.sig.inputs;
        let output = &g.sig.output;
        let doc = format!(
            " The `{}` getter: writes msvm's `{}` table for the loader.",
            name, t.name
        );
        out.extend(quote! {
            #[doc = #doc]
            ///
            /// # Safety
            ///
            /// The table pointer must be null or valid for writing one table
            /// of the requested version (at least this header's).
            #[no_mangle]
            pub unsafe extern "C" fn #name(#inputs) #output {
                unsafe {
                    crate::ddi::write_table(#version, #table, || crate::ddi::#fill(#stubbed()))
                }
            }
        });
    }
    for t in &tables {
        assert!(seen.contains(&t.name), "no getter for table {}", t.name);
    }
    let code = prettyplease::unparse(&syn::parse2(out).expect("generated code parses"));
    format!(
        "// Generated by build.rs: {} tables, {} stubs, {} getters.\n\
         //\n\
         // SAFETY (every unsafe block): a getter's table pointer is null or\n\
         // valid for writing its table (its caller's contract), which is what\n\
         // crate::ddi::write_table needs.\n\n{code}",
        tables.len(),
        pfns.len(),
        getters.len()
    )
}

/// `ze_pfnInit_t` -> `stub_ze_pfnInit`.
fn stub_ident(pfn: &Ident) -> Ident {
    let s = pfn.to_string();
    ident(&format!("stub_{}", s.strip_suffix("_t").unwrap_or(&s)))
}
