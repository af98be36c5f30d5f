import { useCallback, useEffect, useMemo, useState, type FormEvent } from "react";
import { Api, ApiError, type Session } from "./lib/api";
import { AppContext, type AppContextValue } from "./lib/hooks";
import { href, navigate, parse, useLocationPath, type View } from "./lib/router";
import { Link, PageHead } from "./components/common";
import { Fleet } from "./screens/Fleet";
import { ModelCatalog, ModelSheet } from "./screens/Models";
import { RoutingRules } from "./screens/RoutingRules";
import { GroupEditor, RouteEditor } from "./screens/RuleEditor";
import { ProviderSheet, Providers } from "./screens/Providers";
import { AdaptiveRouting } from "./screens/Adaptive";
import { ClusterScreen } from "./screens/Cluster";

/// The token lives in this tab only (sessionStorage): a reload keeps the
/// session, closing the tab ends it.
const TOKEN_KEY = "rolter.adminToken";

function storedToken(): string | null {
  try {
    return window.sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

function storeToken(token: string | null) {
  try {
    if (token) window.sessionStorage.setItem(TOKEN_KEY, token);
    else window.sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    // Storage refused (private mode): the session lasts until reload.
  }
}

/// The session `token` opens, or why the node refused it.
async function checkToken(token: string): Promise<{ api: Api; session: Session } | string> {
  const api = new Api(token);
  try {
    return { api, session: await api.session() };
  } catch (e) {
    const error = e as ApiError;
    if (error.status === 401) return "The node does not accept this token. Check it and try again.";
    return error.message;
  }
}

export function App() {
  const [signedIn, setSignedIn] = useState<{ api: Api; session: Session } | null>(null);
  const [checking, setChecking] = useState(() => storedToken() !== null);
  const [message, setMessage] = useState<string | null>(null);

  const signIn = useCallback(async (token: string): Promise<string | null> => {
    const checked = await checkToken(token);
    if (typeof checked === "string") return checked;
    storeToken(token);
    setSignedIn(checked);
    setMessage(null);
    return null;
  }, []);

  const signOut = useCallback((why?: string) => {
    storeToken(null);
    setSignedIn(null);
    setMessage(why ?? null);
  }, []);

  // The token of an earlier visit, checked once.
  useEffect(() => {
    const token = storedToken();
    if (!token) return;
    let cancelled = false;
    checkToken(token).then((checked) => {
      if (cancelled) return;
      if (typeof checked === "string") {
        storeToken(null);
        setMessage(checked);
      } else {
        setSignedIn(checked);
      }
      setChecking(false);
    });
    return () => {
      cancelled = true;
    };
  }, []);

  if (checking && !signedIn) return <div className="signin muted">Signing in…</div>;
  if (!signedIn) return <SignIn onSignIn={signIn} message={message} />;
  return <Shell api={signedIn.api} session={signedIn.session} signOut={signOut} />;
}

function SignIn(props: { onSignIn: (token: string) => Promise<string | null>; message: string | null }) {
  const [token, setToken] = useState("");
  const [busy, setBusy] = useState(false);
  const [problem, setProblem] = useState<string | null>(null);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    if (!token.trim()) {
      setProblem("Enter an admin token.");
      return;
    }
    setBusy(true);
    const result = await props.onSignIn(token.trim());
    setBusy(false);
    setProblem(result);
  };
  const shown = problem ?? props.message;
  return (
    <div className="signin">
      <div className="panel">
        <h1>rolter</h1>
        <p className="muted">
          Sign in with an admin token of this node: one of <code>[[admin_tokens]]</code> in rolter.toml, or a
          token created on a control node. Viewer tokens read, admin tokens change the configuration, superadmin
          tokens also run adaptive routing.
        </p>
        <form onSubmit={submit}>
          <label htmlFor="token">Admin token</label>
          <input
            id="token"
            name="token"
            type="password"
            autoComplete="current-password"
            autoFocus
            value={token}
            onChange={(e) => setToken(e.target.value)}
            placeholder="rt-… or the value of your token variable"
          />
          {shown && (
            <div className="notice error" role="alert">
              {shown}
            </div>
          )}
          <button className="primary" type="submit" disabled={busy}>
            {busy ? "Signing in…" : "Sign in"}
          </button>
        </form>
      </div>
    </div>
  );
}

const NAV: { label: string; to: () => string; screens: View["screen"][]; superadmin?: boolean; tag?: string }[] = [
  { label: "Fleet", to: href.fleet, screens: ["fleet"], tag: "live" },
  { label: "Model catalog", to: href.models, screens: ["models", "model"] },
  { label: "Routing rules", to: href.routes, screens: ["routes", "route-edit", "group-edit"] },
  { label: "Providers", to: href.providers, screens: ["providers", "provider"] },
  { label: "Adaptive routing", to: href.adaptive, screens: ["adaptive"], superadmin: true },
  { label: "Cluster", to: href.cluster, screens: ["cluster"] },
];

function Shell(props: { api: Api; session: Session; signOut: (why?: string) => void }) {
  const { api, session, signOut } = props;
  const path = useLocationPath();
  const view = parse(path);
  const context: AppContextValue = useMemo(() => {
    const editor = session.role === "admin" || session.role === "superadmin";
    return {
      api,
      session,
      canEdit: editor && !session.read_only,
      isSuperadmin: session.role === "superadmin",
      signOut,
    };
  }, [api, session, signOut]);

  useEffect(() => {
    if (path === "/ui" || path === "/ui/") navigate(href.fleet(), true);
  }, [path]);
  // On a narrow screen the menu folds away; it closes once a screen is chosen.
  const [menuOpen, setMenuOpen] = useState(false);
  const [menuPath, setMenuPath] = useState(path);
  if (menuPath !== path) {
    setMenuPath(path);
    setMenuOpen(false);
  }

  return (
    <AppContext.Provider value={context}>
      <div className="shell">
        <nav className={`nav ${menuOpen ? "open" : ""}`} aria-label="Screens">
          <div className="nav-top">
            <div>
              <div className="brand">rolter</div>
              <div className="brand-sub">
                {session.node_role} node{session.read_only ? " · read-only" : ""}
              </div>
            </div>
            <button
              type="button"
              className="nav-toggle"
              aria-expanded={menuOpen}
              aria-controls="nav-links"
              onClick={() => setMenuOpen((open) => !open)}
            >
              {menuOpen ? "Close" : "Menu"}
            </button>
          </div>
          <div className="nav-links" id="nav-links">
            {NAV.filter((item) => !item.superadmin || context.isSuperadmin).map((item) => (
              <Link key={item.label} to={item.to()} className={item.screens.includes(view.screen) ? "active" : ""}>
                {item.label}
                {item.tag && <span className="nav-tag">{item.tag}</span>}
              </Link>
            ))}
          </div>
          <div className="nav-foot">
            Signed in as <strong data-testid="token-name">{session.token_name}</strong>
            <div data-testid="role">{session.role}</div>
            <button type="button" onClick={() => signOut()}>
              Sign out
            </button>
          </div>
        </nav>
        <main className="main">
          <Screen view={view} />
        </main>
      </div>
    </AppContext.Provider>
  );
}

function Screen(props: { view: View }) {
  const { view } = props;
  switch (view.screen) {
    case "fleet":
      return <Fleet />;
    case "models":
      return <ModelCatalog />;
    case "model":
      return <ModelSheet model={view.model} />;
    case "routes":
      return <RoutingRules />;
    case "route-edit":
      return <RouteEditor key={view.model ?? "new"} model={view.model} />;
    case "group-edit":
      return <GroupEditor key={view.slug ?? "new"} slug={view.slug} />;
    case "providers":
      return <Providers />;
    case "provider":
      return <ProviderSheet key={view.slug ?? "new"} slug={view.slug} />;
    case "adaptive":
      return <AdaptiveRouting />;
    case "cluster":
      return <ClusterScreen />;
    case "not-found":
      return (
        <PageHead title="Not found">
          Nothing lives at <code>{view.path}</code>. <Link to={href.fleet()}>Back to the fleet</Link>.
        </PageHead>
      );
  }
}
