// node-oidc-provider (npm `oidc-provider`, a certified OpenID provider) on loopback, for the
// tests of `toolgate mcp serve --http` against real JWT access tokens (issue 34 item 6).
// Installed by layers/idp/scripts/install-oidc-provider.sh. Test support only: plain http on
// 127.0.0.1, secrets made up at start and printed.
//
//   node oidc_provider.mjs [--modules DIR] [--port N] [--resource URL]... \
//       [--client ID[:TTL_SECS]]... [--scopes "mcp:tools mcp:read"]
//
// - Each `--client` may use the client credentials grant (and only it), authenticating with
//   client_secret_basic; its access tokens live TTL_SECS (default 300).
// - Resource indicators (RFC 8707): each `--resource` is a resource server whose access
//   tokens are JWTs (RFC 9068, `typ: at+jwt`, RS256) with `aud` the resource, holding the
//   requested scopes among `--scopes`. A token request must name one.
// - Keys: one RSA key at start. `POST /admin/rotate` makes a new key, publishes it beside the
//   old one and signs with it from then on; `POST /admin/retire` withdraws every key but the
//   signing one. Each answers `{"kid", "published"}`. The JWKS is served at `jwks_uri`.
//
// When listening, one line of JSON on standard output: `issuer`, `token_endpoint`,
// `jwks_uri`, `port`, `kid` and `clients` (id → secret).

import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const args = process.argv.slice(2);
const opts = { port: 0, resources: [], clients: [], scopes: 'mcp:tools mcp:read', modules: undefined };
for (let i = 0; i < args.length; i += 1) {
  const [flag, value] = [args[i], args[i + 1]];
  if (value === undefined) throw new Error(`${flag} needs a value`);
  i += 1;
  switch (flag) {
    case '--port': opts.port = Number(value); break;
    case '--resource': opts.resources.push(value); break;
    case '--client': {
      const [id, ttl] = value.split(':');
      opts.clients.push({ id, ttl: ttl === undefined ? 300 : Number(ttl) });
      break;
    }
    case '--scopes': opts.scopes = value; break;
    case '--modules': opts.modules = value; break;
    default: throw new Error(`unknown option ${flag}`);
  }
}
if (opts.resources.length === 0 || opts.clients.length === 0) {
  throw new Error('give at least one --resource and one --client');
}

// The package, from the folder the install script filled (not from beside this file).
const here = dirname(fileURLToPath(import.meta.url));
const modules = resolve(opts.modules ?? process.env.TOOLGATE_OIDC_PROVIDER
  ?? join(here, '../../../../.tmp/oidc-provider'));
const entry = createRequire(join(modules, 'package.json')).resolve('oidc-provider');
const { default: Provider, errors } = await import(pathToFileURL(entry).href);

let serial = 0;
function newKey() {
  serial += 1;
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: `toolgate-test-${serial}-${randomBytes(4).toString('hex')}`, use: 'sig', alg: 'RS256' };
}

const clients = opts.clients.map(({ id, ttl }) => ({
  client_id: id,
  client_secret: randomBytes(24).toString('base64url'),
  grant_types: ['client_credentials'],
  response_types: [],
  redirect_uris: [],
  token_endpoint_auth_method: 'client_secret_basic',
  ttl,
}));
const ttlOf = new Map(clients.map((c) => [c.client_id, c.ttl]));

let keys = [newKey()];
let current;
const server = createServer((req, res) => {
  if (req.method === 'POST' && (req.url === '/admin/rotate' || req.url === '/admin/retire')) {
    if (req.url === '/admin/rotate') {
      keys = [newKey(), ...keys];
    } else {
      keys = keys.slice(0, 1);
    }
    current = provider();
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ kid: keys[0].kid, published: keys.map((k) => k.kid) }));
    return;
  }
  current.callback()(req, res);
});
await new Promise((ok) => { server.listen(opts.port, '127.0.0.1', ok); });
const { port } = server.address();
const issuer = `http://127.0.0.1:${port}`;

// A provider publishing `keys` and signing with the first; rebuilt on each change of keys
// (clients and resource servers are static, and client credentials tokens are JWTs, so
// nothing held is lost).
function provider() {
  const signing = keys[0].kid;
  const p = new Provider(issuer, {
    clients: clients.map(({ ttl, ...c }) => c),
    jwks: { keys },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      introspection: { enabled: false },
      revocation: { enabled: false },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => undefined,
        useGrantedResource: () => false,
        getResourceServerInfo: (_ctx, resourceIndicator, client) => {
          if (!opts.resources.includes(resourceIndicator)) {
            throw new errors.InvalidTarget();
          }
          return {
            scope: opts.scopes,
            audience: resourceIndicator,
            accessTokenTTL: ttlOf.get(client.clientId) ?? 300,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'RS256', kid: signing } },
          };
        },
      },
    },
  });
  p.on('server_error', (_ctx, err) => { process.stderr.write(`oidc-provider: ${err.stack}\n`); });
  return p;
}
current = provider();

process.stdout.write(`${JSON.stringify({
  issuer,
  token_endpoint: `${issuer}/token`,
  jwks_uri: `${issuer}/jwks`,
  port,
  kid: keys[0].kid,
  clients: Object.fromEntries(clients.map((c) => [c.client_id, c.client_secret])),
})}\n`);
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => { server.close(); process.exit(0); });
}
