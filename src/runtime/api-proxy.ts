// The proxy to the API server, chosen as kubectl (client-go, Go's net/http) chooses it: the
// cluster's `proxy-url` when the kubeconfig gives one, otherwise HTTPS_PROXY (HTTP_PROXY for an
// http:// server) unless NO_PROXY names the host, and never for localhost or a loopback address.
import net from "node:net";

export type ProxyEnv = Record<string, string | undefined>;

export interface ProxyChoice {
  url: URL;
  /** Where the proxy came from, for error messages: "proxy-url" or the variable's name. */
  source: string;
}

/** The proxy for calls to `server`, or undefined to dial it directly. */
export function proxyFor(server: URL, proxyUrl: string | undefined, env: ProxyEnv): ProxyChoice | undefined {
  if (proxyUrl) return { url: parseProxy(proxyUrl, "clusters[].cluster.proxy-url"), source: "proxy-url" };
  const names = server.protocol === "https:" ? ["HTTPS_PROXY", "https_proxy"] : ["HTTP_PROXY", "http_proxy"];
  const name = names.find((candidate) => env[candidate]);
  if (!name) return undefined;
  if (!useProxy(server, env.NO_PROXY || env.no_proxy || "")) return undefined;
  return { url: parseProxy(env[name] ?? "", name), source: name };
}

/** A proxy URL as Go reads one: without a scheme it is an http:// proxy. */
function parseProxy(value: string, field: string): URL {
  let url: URL;
  try {
    url = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(value) ? value : `http://${value}`);
  } catch {
    throw new Error(`${field} ${JSON.stringify(value)} is not a proxy URL`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:" && !url.protocol.startsWith("socks")) {
    throw new Error(`${field} ${JSON.stringify(value)}: the proxy scheme must be http, https or socks5`);
  }
  return url;
}

/** Go's httpproxy useProxy: false for loopback and for what NO_PROXY names. */
function useProxy(server: URL, noProxy: string): boolean {
  const host = server.hostname.replace(/^\[(.*)\]$/, "$1").toLowerCase();
  const port = server.port || (server.protocol === "https:" ? "443" : "80");
  if (host === "localhost") return false;
  if (net.isIP(host) && isLoopback(host)) return false;
  for (const raw of noProxy.split(",")) {
    const entry = raw.trim().toLowerCase();
    if (entry === "") continue;
    if (entry === "*") return false;
    if (entry.includes("/") && net.isIP(host)) {
      if (inCidr(host, entry)) return false;
      continue;
    }
    let entryHost = entry;
    let entryPort = "";
    const withPort = /^(.*):(\d+)$/.exec(entry);
    if (withPort && !net.isIPv6(entry)) {
      entryHost = withPort[1] ?? "";
      entryPort = withPort[2] ?? "";
    }
    entryHost = entryHost.replace(/^\[(.*)\]$/, "$1");
    if (entryPort && entryPort !== port) continue;
    if (net.isIP(entryHost)) {
      if (entryHost === host) return false;
      continue;
    }
    if (entryHost.startsWith("*.")) entryHost = entryHost.slice(1);
    // "example.com" matches the host and its subdomains, ".example.com" only the subdomains.
    if (entryHost.startsWith(".")) {
      if (host.endsWith(entryHost)) return false;
    } else if (host === entryHost || host.endsWith(`.${entryHost}`)) {
      return false;
    }
  }
  return true;
}

function isLoopback(ip: string): boolean {
  if (net.isIPv4(ip)) return ip.startsWith("127.");
  return ip === "::1" || /^::ffff:127\./.test(ip);
}

function inCidr(ip: string, cidr: string): boolean {
  const [base, bits] = cidr.split("/");
  const prefix = Number(bits);
  if (!base || !Number.isInteger(prefix)) return false;
  const type = net.isIPv4(base) ? "ipv4" : net.isIPv6(base) ? "ipv6" : undefined;
  if (!type || (type === "ipv4") !== net.isIPv4(ip)) return false;
  const list = new net.BlockList();
  try {
    list.addSubnet(base, prefix, type);
  } catch {
    return false;
  }
  return list.check(ip, type);
}
