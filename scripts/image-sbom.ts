// The image's SBOM (CycloneDX 1.5): the bundle's SBOM (dist/bin/sbom.cdx.json) merged with what
// the image's root holds beside it: every Debian package dpkg has installed, the Node runtime and
// the npm packages installed globally with it (npm, corepack in the official image). The
// Dockerfile's `image-packages` stage, a copy of the runtime stage's root, writes what this reads
// (dpkg-query's list, `node --version`, os-release, the packages' copyright files and the global
// packages' package.json files) into one folder; the build stage runs
// `node dist/scripts/image-sbom.js INPUT BUNDLE_SBOM OUT`, and the image ships OUT as
// /usr/share/doc/playbook-controller/sbom.image.cdx.json.
//
// A Debian package's licence comes from its copyright file where that file is machine-readable
// (DEP-5) and its `Files: *` paragraph names licences Debian and SPDX spell alike or map one to
// one; otherwise the component has no licence (the copyright file in the image has the details).
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { z } from "zod";

/** Where each input lies in the folder the Dockerfile's image-packages stage fills. */
export const INPUT_FILES = {
  /** `dpkg-query -W -f='${db:Status-Abbrev}\t${Package}\t${Version}\t${Architecture}\n'` */
  packages: "dpkg-packages.tsv",
  /** `node --version` */
  nodeVersion: "node-version",
  osRelease: "os-release",
  /** /usr/share/doc, as the image has it (slim: copyright files only). */
  doc: "doc",
  /** Each global npm package's package.json, at its folder under /usr/local/lib/node_modules. */
  globalModules: "node_modules",
  /**
   * Libraries linked statically into the image's own programs (musl, into the task containers'
   * agent): `linked/NAME/version` (the Debian package's version it was built with),
   * `linked/NAME/copyright` (that package's copyright file) and `linked/NAME/into` (the program's
   * path in the image). dpkg in the image does not know them: they came from the build stage.
   */
  linked: "linked",
} as const;

export interface DebianPackage {
  name: string;
  version: string;
  arch: string;
}

/** Debian's short licence names (copyright-format 1.0) that map to one SPDX id. */
const DEBIAN_TO_SPDX: Record<string, string> = {
  "gpl-1": "GPL-1.0-only",
  "gpl-1+": "GPL-1.0-or-later",
  "gpl-2": "GPL-2.0-only",
  "gpl-2+": "GPL-2.0-or-later",
  "gpl-3": "GPL-3.0-only",
  "gpl-3+": "GPL-3.0-or-later",
  "lgpl-2": "LGPL-2.0-only",
  "lgpl-2+": "LGPL-2.0-or-later",
  "lgpl-2.1": "LGPL-2.1-only",
  "lgpl-2.1+": "LGPL-2.1-or-later",
  "lgpl-3": "LGPL-3.0-only",
  "lgpl-3+": "LGPL-3.0-or-later",
  "agpl-3": "AGPL-3.0-only",
  "agpl-3+": "AGPL-3.0-or-later",
  expat: "MIT",
  mit: "MIT",
  isc: "ISC",
  "bsd-2-clause": "BSD-2-Clause",
  "bsd-3-clause": "BSD-3-Clause",
  "bsd-4-clause": "BSD-4-Clause",
  "apache-2.0": "Apache-2.0",
  "mpl-2.0": "MPL-2.0",
  zlib: "Zlib",
  "artistic-2.0": "Artistic-2.0",
  "cc0-1.0": "CC0-1.0",
  "gfdl-1.3": "GFDL-1.3-only",
  "gfdl-1.3+": "GFDL-1.3-or-later",
};

/**
 * Debian packages whose copyright file is prose, not DEP-5, with the licence that prose states
 * (taken only while the prose still says so): busybox-static, the task containers' shell where an
 * image has none, is the GPL "version 2 dated June, 1991", without "or later".
 */
const PROSE_LICENSES: Record<string, { id: string; says: RegExp }> = {
  "busybox-static": {
    id: "GPL-2.0-only",
    says: /GNU General Public License[\s\S]*\bversion 2 dated June, 1991/,
  },
};

function proseLicense(name: string, copyright: string): object[] | undefined {
  const known = PROSE_LICENSES[name];
  return known?.says.test(copyright) ? [{ license: { id: known.id } }] : undefined;
}

/** dpkg-query's lines: the installed packages ("ii"), sorted by name. */
export function parseDpkgList(text: string): DebianPackage[] {
  const packages: DebianPackage[] = [];
  for (const [index, line] of text.split("\n").entries()) {
    if (line.trim() === "") continue;
    const fields = line.split("\t");
    if (fields.length !== 4 || fields.slice(1).some((field) => field === "")) {
      throw new Error(
        `${INPUT_FILES.packages} line ${index + 1}: "${line}" is not STATUS\\tNAME\\tVERSION\\tARCH`,
      );
    }
    const [status = "", name = "", version = "", arch = ""] = fields;
    // "ii": wanted installed and installed; packages removed but configured ("rc") are not in the image.
    if (status.trim() === "ii") packages.push({ name, version, arch });
  }
  return packages.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** A package URL for a Debian package (purl-spec's deb type; an epoch's colon stays as it is). */
export function debPurl(p: DebianPackage, distro: string | undefined): string {
  const version = encodeURIComponent(p.version).replaceAll("%3A", ":");
  const qualifiers = [`arch=${encodeURIComponent(p.arch)}`];
  if (distro !== undefined) qualifiers.push(`distro=${encodeURIComponent(distro)}`);
  return `pkg:deb/debian/${encodeURIComponent(p.name)}@${version}?${qualifiers.join("&")}`;
}

/** A CycloneDX licence list from a DEP-5 copyright file's `Files: *` paragraph, or undefined. */
export function debianLicense(copyright: string): object[] | undefined {
  const paragraphs = copyright.replaceAll("\r", "").split(/\n[ \t]*\n/);
  if (!/^Format:\s*\S*copyright-format\/1\.0/im.test(paragraphs[0] ?? "")) return undefined;
  const files = paragraphs.find((p) => /^Files:\s*\*\s*$/im.test(p));
  const short = files && /^License:[ \t]*(\S[^\n]*)$/im.exec(files)?.[1]?.trim();
  if (!short) return undefined;
  const terms = short.split(/\s+(or|and)\s+/i);
  // Both together leave the grouping to the reader: not simple.
  if (new Set(terms.filter((_, index) => index % 2 === 1).map((op) => op.toLowerCase())).size > 1) {
    return undefined;
  }
  const ids: string[] = [];
  for (const [index, term] of terms.entries()) {
    if (index % 2 === 1) {
      ids.push(term.toUpperCase());
      continue;
    }
    const id = DEBIAN_TO_SPDX[term.replace(/^\(|\)$/g, "").toLowerCase()];
    if (id === undefined) return undefined;
    ids.push(id);
  }
  return ids.length === 1 ? [{ license: { id: ids[0] } }] : [{ expression: ids.join(" ") }];
}

const BundleSbom = z.object({
  bomFormat: z.literal("CycloneDX"),
  metadata: z.object({
    component: z.object({ name: z.string().min(1), version: z.string().min(1) }).passthrough(),
  }),
  components: z.array(z.object({ "bom-ref": z.string().min(1) }).passthrough()),
});

const GlobalPackageJson = z.object({
  name: z.string().min(1),
  version: z.string().min(1),
  license: z.string().min(1).optional(),
});

/** The global npm packages' package.json files under `dir` (@scope/name/package.json too). */
function globalPackages(dir: string): z.infer<typeof GlobalPackageJson>[] {
  if (!existsSync(dir)) return [];
  const folders = readdirSync(dir).flatMap((name) =>
    name.startsWith("@") ? readdirSync(path.join(dir, name)).map((sub) => path.join(name, sub)) : [name],
  );
  return folders
    .map((folder) => path.join(dir, folder, "package.json"))
    .filter((file) => existsSync(file))
    .map((file) => {
      const parsed = GlobalPackageJson.safeParse(JSON.parse(readFileSync(file, "utf8")));
      if (!parsed.success) throw new Error(`${file}: ${parsed.error.message}`);
      return parsed.data;
    })
    .sort((a, b) => (a.name < b.name ? -1 : 1));
}

/** The statically linked libraries under `dir` (see INPUT_FILES.linked), sorted by name. */
function linkedLibraries(dir: string): object[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .sort()
    .map((name) => {
      const read = (file: string) => readFileSync(path.join(dir, name, file), "utf8").trim();
      const debianVersion = read("version");
      // The upstream release: Debian's version without its epoch and revision.
      const version = debianVersion.replace(/^\d+:/, "").replace(/-[^-]+$/, "");
      if (!/^\d[\w.+~]*$/.test(version)) {
        throw new Error(`${INPUT_FILES.linked}/${name}/version: "${debianVersion}" is not a Debian version`);
      }
      const copyright = path.join(dir, name, "copyright");
      const licenses = existsSync(copyright) ? debianLicense(readFileSync(copyright, "utf8")) : undefined;
      const purl = `pkg:generic/${encodeURIComponent(name)}@${encodeURIComponent(version)}`;
      return {
        type: "library",
        "bom-ref": `${purl}#linked`,
        name,
        version,
        description: `linked statically into ${read("into")} (built with Debian's ${name} ${debianVersion})`,
        purl,
        ...(licenses === undefined ? {} : { licenses }),
      };
    });
}

/** The image's SBOM from the image-packages stage's folder `input` and the bundle's SBOM. */
export function imageSbom(input: string, bundleSbomText: string): object {
  const bundle = BundleSbom.parse(JSON.parse(bundleSbomText));
  const product = bundle.metadata.component;
  const nodeVersion = readFileSync(path.join(input, INPUT_FILES.nodeVersion), "utf8").trim();
  if (!/^v\d+\.\d+\.\d+$/.test(nodeVersion)) {
    throw new Error(`${INPUT_FILES.nodeVersion}: "${nodeVersion}" is not what node --version prints`);
  }
  const osRelease = readFileSync(path.join(input, INPUT_FILES.osRelease), "utf8");
  const versionId = /^VERSION_ID="?([^"\n]+)"?$/m.exec(osRelease)?.[1];
  const distro = versionId === undefined ? undefined : `debian-${versionId}`;
  const debs = parseDpkgList(readFileSync(path.join(input, INPUT_FILES.packages), "utf8"));
  if (debs.length === 0) throw new Error(`${INPUT_FILES.packages}: no installed package`);

  const node = nodeVersion.slice(1);
  const components: object[] = [
    // The bundle (an application) and what it inlines, as the bundle's own SBOM lists them.
    { ...product, type: "application" },
    ...bundle.components,
    {
      type: "application",
      "bom-ref": `pkg:generic/node@${node}`,
      name: "node",
      version: node,
      description: "Node.js runtime (/usr/local/bin/node)",
      purl: `pkg:generic/node@${node}?download_url=${encodeURIComponent(`https://nodejs.org/dist/${nodeVersion}/`)}`,
      licenses: [{ license: { id: "MIT" } }],
    },
    ...globalPackages(path.join(input, INPUT_FILES.globalModules)).map((p) => {
      const purl = `pkg:npm/${p.name.replace(/^@/, "%40")}@${p.version}`;
      return {
        type: "application",
        "bom-ref": `${purl}#global`,
        name: p.name,
        version: p.version,
        description: `installed with Node in /usr/local/lib/node_modules/${p.name}`,
        purl,
        ...(p.license === undefined ? {} : { licenses: [{ expression: p.license }] }),
      };
    }),
    ...linkedLibraries(path.join(input, INPUT_FILES.linked)),
    ...debs.map((p) => {
      const copyrightFile = path.join(input, INPUT_FILES.doc, p.name, "copyright");
      const copyright = existsSync(copyrightFile) ? readFileSync(copyrightFile, "utf8") : undefined;
      const licenses =
        copyright === undefined ? undefined : (debianLicense(copyright) ?? proseLicense(p.name, copyright));
      const purl = debPurl(p, distro);
      return {
        type: "library",
        "bom-ref": purl,
        name: p.name,
        version: p.version,
        purl,
        ...(licenses === undefined ? {} : { licenses }),
      };
    }),
  ];
  return {
    bomFormat: "CycloneDX",
    specVersion: "1.5",
    version: 1,
    metadata: {
      component: {
        type: "container",
        "bom-ref": `container:${product.name}@${product.version}`,
        name: product.name,
        version: product.version,
        description: `the ${product.name} image: Debian ${versionId ?? "(unknown release)"}, Node ${nodeVersion}, the playbook bundle`,
      },
    },
    components,
  };
}

if (process.argv[1] && import.meta.filename === path.resolve(process.argv[1])) {
  const [input, bundleSbomFile, out] = process.argv.slice(2);
  if (input === undefined || bundleSbomFile === undefined || out === undefined) {
    process.stderr.write("usage: node dist/scripts/image-sbom.js INPUT_DIR BUNDLE_SBOM OUT\n");
    process.exit(2);
  }
  const sbom = imageSbom(input, readFileSync(bundleSbomFile, "utf8"));
  writeFileSync(out, `${JSON.stringify(sbom, null, 2)}\n`);
  process.stderr.write(
    `image-sbom: wrote ${out} (${(sbom as { components: unknown[] }).components.length} components)\n`,
  );
}
