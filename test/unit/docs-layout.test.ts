// docs/development.md's layout is written from the folders of the checkout (npm run docs:layout):
// it fails here when a folder came or went without the section following, or has no description.
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import {
  generatedLayoutDoc,
  LAYOUT_END,
  LAYOUT_START,
  layoutFolders,
  renderLayout,
  staleDescriptions,
  undescribedFolders,
  withLayout,
} from "../../scripts/docs-layout.js";
import { repoRoot } from "../harness/binaries.js";

/** A checkout of a few folders and a development.md with the layout markers. */
function checkout(folders: string[]): string {
  const root = mkdtempSync(path.join(tmpdir(), "docs-layout-"));
  for (const folder of [...folders, "docs"]) mkdirSync(path.join(root, folder), { recursive: true });
  writeFileSync(path.join(root, "docs", "development.md"), `# Dev\n\n${LAYOUT_START}\n${LAYOUT_END}\n`);
  return root;
}

describe("docs/development.md's layout", () => {
  it("is the one npm run docs:layout writes from the tree", () => {
    const { current, generated } = generatedLayoutDoc();
    expect(current).toBe(generated);
  });

  it("describes every folder under src/ and test/, and every top-level folder", () => {
    expect(undescribedFolders(repoRoot())).toEqual([]);
    expect(staleDescriptions(repoRoot())).toEqual([]);
    expect(layoutFolders(repoRoot())).toEqual(
      expect.arrayContaining(["src/api", "src/pod-runner", "test/unit"]),
    );
  });

  it("goes stale when a folder is added, and is refused naming a folder without a description", () => {
    const root = checkout(["src/api", "src/cli"]);
    const descriptions = { docs: "docs", src: "source", "src/api": "the API", "src/cli": "the CLI" };
    const { generated } = generatedLayoutDoc(root, descriptions);
    writeFileSync(path.join(root, "docs", "development.md"), generated);
    expect(generated).toContain("src/api/  the API");
    expect(generatedLayoutDoc(root, descriptions).current).toBe(generated);

    mkdirSync(path.join(root, "src", "queue"));
    expect(() => renderLayout(root, descriptions)).toThrow(
      "docs:layout: no description for src/queue/: add a line for each to FOLDER_DESCRIPTIONS in scripts/docs-layout.ts",
    );
    const grown = generatedLayoutDoc(root, { ...descriptions, "src/queue": "the queue" });
    expect(grown.generated).not.toBe(grown.current);
    expect(grown.generated).toContain("src/queue/  the queue");
  });

  it("names a description left for a folder that is gone", () => {
    const root = checkout(["src/api"]);
    expect(
      staleDescriptions(root, { docs: "docs", src: "source", "src/api": "the API", "src/old": "gone" }),
    ).toEqual(["src/old"]);
  });

  it("lists folders, not files, so a new file changes nothing", () => {
    const root = checkout(["src/api"]);
    const descriptions = { docs: "docs", src: "source", "src/api": "the API" };
    const before = renderLayout(root, descriptions);
    writeFileSync(path.join(root, "src", "api", "new-thing.ts"), "export {};\n");
    expect(renderLayout(root, descriptions)).toBe(before);
  });

  it("is refused without its markers, naming the file", () => {
    expect(() => withLayout("# Dev\n", "```text\n```", "docs/development.md")).toThrow(
      `docs:layout: docs/development.md has no "${LAYOUT_START}" ... "${LAYOUT_END}" markers`,
    );
  });
});
