//! The operator dashboard's static files, served under `/ui/` on the admin
//! listener of standalone and control nodes.
//!
//! The dashboard (`ui/`, a Vite build) is a single-page app: `index.html`
//! answers `/ui`, `/ui/` and every path below it that is not a file, so a
//! reload of `/ui/routes/chat` lands on the app, which routes on the client.
//! A missing file under `/ui/assets/` is a 404 instead: those are the
//! build's hashed bundles, and HTML in place of a script helps nobody.
//!
//! Where the files are: `ROLTER_UI_DIR`, else `ui/dist` relative to the
//! working directory, resolved once when the admin service is built. When
//! the directory has no `index.html`, every `/ui` path answers a 404 page
//! that says how to build it.
//!
//! Only files inside that directory are served: the request path is
//! percent-decoded, any `..`, `.` or empty segment, backslash or NUL is
//! refused, and the resolved file must still lie under the directory's
//! canonical path (a symlink pointing out of it is not followed out).

use std::path::{Path, PathBuf};

use http::{header, Method, Response, StatusCode};

/// The environment variable naming the dashboard's build directory.
pub const UI_DIR_ENV: &str = "ROLTER_UI_DIR";
/// The build directory when `ROLTER_UI_DIR` is not set, relative to the
/// working directory.
pub const DEFAULT_UI_DIR: &str = "ui/dist";
/// The URL prefix the dashboard is served under (Vite's `base`).
pub const UI_PREFIX: &str = "/ui";

/// The dashboard's build directory, resolved at start.
#[derive(Debug, Clone)]
pub struct UiFiles {
    dir: PathBuf,
}

impl UiFiles {
    /// `ROLTER_UI_DIR`, else [`DEFAULT_UI_DIR`], made absolute against the
    /// working directory now, so a later `chdir` changes nothing.
    pub fn from_env() -> UiFiles {
        let dir = std::env::var_os(UI_DIR_ENV)
            .filter(|dir| !dir.is_empty())
            .map_or_else(|| PathBuf::from(DEFAULT_UI_DIR), PathBuf::from);
        UiFiles::at(dir)
    }

    /// The build directory `dir` (relative paths against the working
    /// directory).
    pub fn at(dir: impl Into<PathBuf>) -> UiFiles {
        let dir = dir.into();
        let dir = if dir.is_absolute() {
            dir
        } else {
            std::env::current_dir().map_or(dir.clone(), |cwd| cwd.join(&dir))
        };
        UiFiles { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether `path` is the dashboard's: `/ui` or below `/ui/`.
    pub fn owns(path: &str) -> bool {
        path == UI_PREFIX
            || path
                .strip_prefix(UI_PREFIX)
                .is_some_and(|rest| rest.starts_with('/'))
    }

    /// Answers a request for `path` (one [`UiFiles::owns`]). Reads the file
    /// off the async workers.
    pub async fn serve(&self, method: &Method, path: &str) -> Response<Vec<u8>> {
        if method != Method::GET && method != Method::HEAD {
            return page(
                StatusCode::METHOD_NOT_ALLOWED,
                "Method not allowed",
                "The dashboard's files answer GET and HEAD only.",
            );
        }
        let files = self.clone();
        let path = path.to_owned();
        let response = tokio::task::spawn_blocking(move || files.answer(&path))
            .await
            .unwrap_or_else(|e| {
                log::error!("serving a dashboard file failed: {e}");
                page(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Internal error",
                    "Reading the dashboard's files failed; the log says why.",
                )
            });
        if method == Method::HEAD {
            let (parts, _) = response.into_parts();
            return Response::from_parts(parts, Vec::new());
        }
        response
    }

    /// The response for `path`, blocking.
    fn answer(&self, path: &str) -> Response<Vec<u8>> {
        let index = self.dir.join("index.html");
        if !index.is_file() {
            return self.not_built();
        }
        let rest = path
            .strip_prefix(UI_PREFIX)
            .unwrap_or_default()
            .trim_start_matches('/');
        let Some(relative) = safe_relative(rest) else {
            return page(
                StatusCode::BAD_REQUEST,
                "Bad path",
                "That path does not name a file of the dashboard.",
            );
        };
        if !relative.as_os_str().is_empty() {
            if let Some(file) = self.existing_file(&relative) {
                return file_response(&file, relative.starts_with("assets"));
            }
            if relative.starts_with("assets") {
                return page(
                    StatusCode::NOT_FOUND,
                    "Not found",
                    "No such file in the dashboard's build. Reload the page: the dashboard may have been rebuilt.",
                );
            }
        }
        // The app routes on the client: every other path is the app.
        file_response(&index, false)
    }

    /// `relative` under the build directory, if it is a file that really
    /// lies inside it (symlinks resolved).
    fn existing_file(&self, relative: &Path) -> Option<PathBuf> {
        let root = self.dir.canonicalize().ok()?;
        let file = self.dir.join(relative).canonicalize().ok()?;
        (file.starts_with(&root) && file.is_file()).then_some(file)
    }

    fn not_built(&self) -> Response<Vec<u8>> {
        page(
            StatusCode::NOT_FOUND,
            "The dashboard is not built",
            &format!(
                "This node serves the dashboard from <code>{dir}</code>, which has no <code>index.html</code>.</p>\
                 <p>Build it from the repository root with <code>cd ui &amp;&amp; npm ci &amp;&amp; npm run build</code> \
                 (<code>make demo</code> does this too), or point <code>{UI_DIR_ENV}</code> at a built copy \
                 and restart the node.",
                dir = html_escape(&self.dir.display().to_string()),
            ),
        )
    }
}

/// The decoded relative path of `rest`, or `None` when it could leave the
/// directory or is not a plain path (`..`, `.`, empty segments inside,
/// backslashes, NUL, bad escapes).
fn safe_relative(rest: &str) -> Option<PathBuf> {
    let decoded = super::api::percent_decode(rest)?;
    let trimmed = decoded.strip_suffix('/').unwrap_or(&decoded);
    let mut path = PathBuf::new();
    if trimmed.is_empty() {
        return Some(path);
    }
    for segment in trimmed.split('/') {
        if segment.is_empty()
            || segment == "."
            || segment == ".."
            || segment.contains('\\')
            || segment.contains('\0')
        {
            return None;
        }
        path.push(segment);
    }
    Some(path)
}

/// The content type of a build file, by extension.
pub fn content_type(path: &Path) -> &'static str {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default()
    {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "ico" => "image/x-icon",
        "woff" => "font/woff",
        "woff2" => "font/woff2",
        "ttf" => "font/ttf",
        "txt" => "text/plain; charset=utf-8",
        "wasm" => "application/wasm",
        _ => "application/octet-stream",
    }
}

/// What the dashboard's pages may load: its own files, inline styles (React
/// style attributes) and its own API; never framed.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// `immutable`: a hashed bundle under `assets/`, cached for good; anything
/// else (the index names the current bundles) is always revalidated.
fn file_response(file: &Path, immutable: bool) -> Response<Vec<u8>> {
    let body = match std::fs::read(file) {
        Ok(body) => body,
        Err(e) => {
            log::error!("reading the dashboard file {}: {e}", file.display());
            return page(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Internal error",
                "A file of the dashboard could not be read; the log says why.",
            );
        }
    };
    let cache = if immutable {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type(file))
        .header(header::CONTENT_LENGTH, body.len())
        .header(header::CACHE_CONTROL, cache)
        .header("x-content-type-options", "nosniff")
        .header("referrer-policy", "no-referrer")
        .header("content-security-policy", CONTENT_SECURITY_POLICY)
        .body(body)
        .unwrap_or_default()
}

/// A small HTML page for errors: the browser shows it as is.
fn page(status: StatusCode, title: &str, body_html: &str) -> Response<Vec<u8>> {
    let body = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>rolter — {title}</title>\
         <style>body{{font:15px/1.5 system-ui,sans-serif;max-width:42rem;margin:4rem auto;padding:0 1rem;color:#1f2933}}\
         code{{background:#eef1f4;padding:0 .25rem;border-radius:3px}}</style></head>\
         <body><h1>{title}</h1><p>{body_html}</p><p><small>rolter admin listener · HTTP {code}</small></p></body></html>\n",
        code = status.as_u16(),
    )
    .into_bytes();
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .header(header::CONTENT_LENGTH, body.len())
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-content-type-options", "nosniff")
        .body(body)
        .unwrap_or_default()
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_could_leave_the_directory_are_refused() {
        for rest in [
            "..",
            "../secret",
            "assets/../../etc/passwd",
            "%2e%2e/etc/passwd",
            "assets/%2E%2E/x",
            "a//b",
            "./index.html",
            "a\\..\\b",
            "a%5c..%5cb",
            "x%00y",
            "bad%zz",
            "bad%ff",
        ] {
            assert_eq!(safe_relative(rest), None, "{rest}");
        }
        assert_eq!(safe_relative(""), Some(PathBuf::new()));
        assert_eq!(
            safe_relative("assets/app-1x2.js"),
            Some(PathBuf::from("assets/app-1x2.js"))
        );
        assert_eq!(
            safe_relative("routes/org%2Fchat/"),
            Some(PathBuf::from("routes/org/chat"))
        );
    }

    #[test]
    fn only_ui_paths_are_owned() {
        assert!(UiFiles::owns("/ui"));
        assert!(UiFiles::owns("/ui/"));
        assert!(UiFiles::owns("/ui/routes/chat"));
        assert!(!UiFiles::owns("/uix"));
        assert!(!UiFiles::owns("/admin/ui"));
    }

    #[test]
    fn content_types_follow_the_extension() {
        assert_eq!(
            content_type(Path::new("a/index.html")),
            "text/html; charset=utf-8"
        );
        assert_eq!(
            content_type(Path::new("assets/x.js")),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(
            content_type(Path::new("assets/x.css")),
            "text/css; charset=utf-8"
        );
        assert_eq!(content_type(Path::new("logo.svg")), "image/svg+xml");
        assert_eq!(content_type(Path::new("blob")), "application/octet-stream");
    }
}
