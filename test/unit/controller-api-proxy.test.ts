// The proxy to the API server, chosen as kubectl (Go's net/http) chooses it.
import { describe, expect, it } from "vitest";
import { proxyFor } from "../../src/runtime/api-proxy.js";

const PROXY = "http://proxy.corp:3128";

describe("the proxy for the API server", () => {
  it.each([
    {
      name: "HTTPS_PROXY for an https server",
      server: "https://api.corp:6443",
      env: { HTTPS_PROXY: PROXY },
      proxy: PROXY,
    },
    {
      name: "https_proxy, lower case",
      server: "https://api.corp:6443",
      env: { https_proxy: PROXY },
      proxy: PROXY,
    },
    {
      name: "HTTP_PROXY is not for an https server",
      server: "https://api.corp:6443",
      env: { HTTP_PROXY: PROXY },
      proxy: undefined,
    },
    {
      name: "HTTP_PROXY for an http server",
      server: "http://api.corp:8080",
      env: { HTTP_PROXY: PROXY },
      proxy: PROXY,
    },
    {
      name: "a proxy without a scheme is http",
      server: "https://api.corp",
      env: { HTTPS_PROXY: "proxy.corp:3128" },
      proxy: PROXY,
    },
    {
      name: "never for localhost",
      server: "https://localhost:6443",
      env: { HTTPS_PROXY: PROXY },
      proxy: undefined,
    },
    {
      name: "never for a loopback address",
      server: "https://127.0.0.2:6443",
      env: { HTTPS_PROXY: PROXY },
      proxy: undefined,
    },
    {
      name: "never for IPv6 loopback",
      server: "https://[::1]:6443",
      env: { HTTPS_PROXY: PROXY },
      proxy: undefined,
    },
    {
      name: "NO_PROXY=*",
      server: "https://api.corp",
      env: { HTTPS_PROXY: PROXY, NO_PROXY: "*" },
      proxy: undefined,
    },
    {
      name: "NO_PROXY names the host",
      server: "https://api.corp",
      env: { HTTPS_PROXY: PROXY, NO_PROXY: "other, api.corp" },
      proxy: undefined,
    },
    {
      name: "NO_PROXY domain covers subdomains",
      server: "https://k8s.api.corp",
      env: { HTTPS_PROXY: PROXY, NO_PROXY: "api.corp" },
      proxy: undefined,
    },
    {
      name: "NO_PROXY .domain: subdomains only",
      server: "https://api.corp",
      env: { HTTPS_PROXY: PROXY, NO_PROXY: ".api.corp" },
      proxy: PROXY,
    },
    {
      name: "NO_PROXY host with another port",
      server: "https://api.corp:6443",
      env: { HTTPS_PROXY: PROXY, NO_PROXY: "api.corp:443" },
      proxy: PROXY,
    },
    {
      name: "NO_PROXY host with its port",
      server: "https://api.corp:6443",
      env: { HTTPS_PROXY: PROXY, NO_PROXY: "api.corp:6443" },
      proxy: undefined,
    },
    {
      name: "NO_PROXY CIDR",
      server: "https://10.0.0.1",
      env: { HTTPS_PROXY: PROXY, NO_PROXY: "10.0.0.0/8" },
      proxy: undefined,
    },
    {
      name: "NO_PROXY CIDR not matching",
      server: "https://192.168.1.1",
      env: { HTTPS_PROXY: PROXY, no_proxy: "10.0.0.0/8" },
      proxy: PROXY,
    },
    {
      name: "a suffix is not a domain",
      server: "https://evilapi.corp",
      env: { HTTPS_PROXY: PROXY, NO_PROXY: "api.corp" },
      proxy: PROXY,
    },
  ])("$name", ({ server, env, proxy }) => {
    expect(proxyFor(new URL(server), undefined, env)?.url.href.replace(/\/$/, "")).toBe(proxy);
  });

  it("takes the cluster's proxy-url over the environment, for any host", () => {
    const choice = proxyFor(new URL("https://127.0.0.1:6443"), "http://other:8080", { HTTPS_PROXY: PROXY });
    expect(choice).toMatchObject({ source: "proxy-url" });
    expect(choice?.url.href).toBe("http://other:8080/");
  });

  it("refuses a proxy it cannot use, naming where it came from", () => {
    expect(() =>
      proxyFor(new URL("https://api.corp"), undefined, { HTTPS_PROXY: "ftp://proxy.corp" }),
    ).toThrow('HTTPS_PROXY "ftp://proxy.corp": the proxy scheme must be http, https or socks5');
  });
});
