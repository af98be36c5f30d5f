// The dashboard is served by the admin listener under /ui/ (src/ui.rs), so
// every asset URL starts there. JSX is compiled by Vite's own transformer
// (the automatic runtime); no React plugin is needed for a production build.
import { defineConfig } from "vitest/config";

export default defineConfig({
  base: "/ui/",
  build: {
    outDir: "dist",
    emptyOutDir: true,
    sourcemap: false,
    chunkSizeWarningLimit: 1024,
  },
  oxc: {
    jsx: { runtime: "automatic" },
  },
  server: {
    // `npm run dev` against a local node: the APIs live on its admin listener.
    proxy: {
      "/api": "http://127.0.0.1:9090",
      "/admin": "http://127.0.0.1:9090",
    },
  },
  test: {
    include: ["src/**/*.test.ts", "src/**/*.test.tsx"],
    environment: "node",
  },
});
