// node-oidc-provider (npm `oidc-provider`, a certified OpenID provider) on loopback, for the
// tests of `toolgate mcp serve --http` against real JWT access tokens (issue 34 item 6).
// Installed by layers/idp/scripts/install-oidc-provider.sh. Test support only: plain http on
// 127.0.0.1, secrets made up at start and printed.
//
//   node oidc_provider.mjs [--modules DIR] [--port N] [--resource URL]... \
//       [--client ID[:TTL_SECS]]... [--user-client ID[:TTL_SECS]]... \
//       [--exchange-client ID[:TTL_SECS]]... [--scopes "mcp:tools mcp:read"]
//
// - Each `--client` may use the client credentials grant (and only it), authenticating with
//   client_secret_basic; its access tokens live TTL_SECS (default 300).
// - Each `--user-client` is an agent acting for users (registered for the authorization code
//   grant). No browser logs in here: `POST /admin/user-token` mints what a login of a user
//   through it would give, `{"client_id", "sub", "resource", "scope"?, "ttl"?, "act"?}` →
//   `{"access_token", "expires_in"}`, living `ttl` or else TTL_SECS (default 300). An id may
//   be both `--client` and `--user-client` (one client, both grants, `--client`'s TTL for its
//   client credentials tokens).
// - Each `--exchange-client` may use token exchange (RFC 8693) and client credentials,
//   authenticating with client_secret_basic: `grant_type=urn:ietf:params:oauth:grant-type:
//   token-exchange` with `subject_token` (a JWT this provider signed with a key it still
//   publishes, unexpired), `subject_token_type` (`urn:ietf:params:oauth:token-type:
//   access_token` or `…:jwt`), the target `resource` (else `audience`) among `--resource`,
//   and `scope` (else the subject token's), kept to `--scopes`. The answer is `{access_token,
//   issued_token_type: …:access_token, token_type: "Bearer", expires_in, scope}`, the token
//   living TTL_SECS (default 300). `GET /admin/exchanges` answers `{"count"}` (exchanges
//   served); `POST /admin/exchange-off` makes every exchange fail `invalid_grant` until
//   `POST /admin/exchange-on` (each answers `{"exchange": "off"|"on"}`).
// - Resource indicators (RFC 8707): each `--resource` is a resource server whose access
//   tokens are JWTs (RFC 9068, `typ: at+jwt`, RS256, `kid` the signing key) with `aud` the
//   resource, holding the requested scopes among `--scopes`. A token request must name one.
//   Claims: `iss`, `sub`, `client_id`, `aud`, `scope` (when any), `iat`, `exp`, `jti`, and
//   - client credentials: `sub` = `client_id` = the client;
//   - user tokens: `sub` the user, `client_id` the user client, `act` when given;
//   - exchanged tokens: `sub` the subject token's, `client_id` the exchange client, and
//     `act: {"sub": <subject token's client_id, else azp>}`, holding the subject token's own
//     `act` as `act.act` when it had one (RFC 8693 §4.1: outermost is the current actor).
// - Keys: one RSA key at start. `POST /admin/rotate` makes a new key, publishes it beside the
//   old one and signs with it from then on; `POST /admin/retire` withdraws every key but the
//   signing one. Each answers `{"kid", "published"}`. The JWKS is served at `jwks_uri`.
//
// When listening, one line of JSON on standard output: `issuer`, `token_endpoint`,
// `jwks_uri`, `port`, `kid` and `clients` (id → secret, for every kind of client).

import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const args = process.argv.slice(2);
const opts = {
  port: 0, resources: [], clients: [], userClients: [], exchangeClients: [], scopes: 'mcp:tools mcp:read', modules: undefined,
};
// `ID[:TTL_SECS]`, the TTL 300 when not given.
function clientArg(value) {
  const [id, ttl] = value.split(':');
  return { id, ttl: ttl === undefined ? 300 : Number(ttl) };
}
for (let i = 0; i < args.length; i += 1) {
  const [flag, value] = [args[i], args[i + 1]];
  if (value === undefined) throw new Error(`${flag} needs a value`);
  i += 1;
  switch (flag) {
    case '--port': opts.port = Number(value); break;
    case '--resource': opts.resources.push(value); break;
    case '--client': opts.clients.push(clientArg(value)); break;
    case '--user-client': opts.userClients.push(clientArg(value)); break;
    case '--exchange-client': opts.exchangeClients.push(clientArg(value)); break;
    case '--scopes': opts.scopes = value; break;
    case '--modules': opts.modules = value; break;
    default: throw new Error(`unknown option ${flag}`);
  }
}
if (opts.resources.length === 0
  || opts.clients.length + opts.userClients.length + opts.exchangeClients.length === 0) {
  throw new Error('give at least one --resource and one --client (or --user-client, --exchange-client)');
}

// The packages, from the folder the install script filled (not from beside this file); `jose`
// comes with oidc-provider.
const here = dirname(fileURLToPath(import.meta.url));
const modules = resolve(opts.modules ?? process.env.TOOLGATE_OIDC_PROVIDER
  ?? join(here, '../../../../.tmp/oidc-provider'));
const require = createRequire(join(modules, 'package.json'));
const entry = require.resolve('oidc-provider');
const { default: Provider, errors } = await import(pathToFileURL(entry).href);
const { createLocalJWKSet, jwtVerify } = await import(pathToFileURL(require.resolve('jose')).href);

const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
const JWT_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:jwt';

let serial = 0;
function newKey() {
  serial += 1;
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: `toolgate-test-${serial}-${randomBytes(4).toString('hex')}`, use: 'sig', alg: 'RS256' };
}

// One static client per id, whichever flags name it (the provider wants ids unique): the
// client credentials grant for `--client` and `--exchange-client`, token exchange for
// `--exchange-client`, the authorization code grant (no login is served, see
// /admin/user-token) for `--user-client`. TTLs are kept per role.
const ccTtl = new Map(); // client credentials tokens
const userTtl = new Map(); // /admin/user-token tokens
const exchangeTtl = new Map(); // token exchange tokens
for (const { id, ttl } of opts.exchangeClients) { ccTtl.set(id, ttl); exchangeTtl.set(id, ttl); }
for (const { id, ttl } of opts.clients) ccTtl.set(id, ttl);
for (const { id, ttl } of opts.userClients) userTtl.set(id, ttl);
const ids = [...new Set([...opts.clients, ...opts.userClients, ...opts.exchangeClients].map((c) => c.id))];
const clients = ids.map((id) => {
  const user = userTtl.has(id);
  return {
    client_id: id,
    client_secret: randomBytes(24).toString('base64url'),
    grant_types: [
      ...(ccTtl.has(id) ? ['client_credentials'] : []),
      ...(exchangeTtl.has(id) ? [TOKEN_EXCHANGE] : []),
      ...(user ? ['authorization_code'] : []),
    ],
    response_types: user ? ['code'] : [],
    redirect_uris: user ? ['http://127.0.0.1/callback'] : [],
    token_endpoint_auth_method: 'client_secret_basic',
  };
});

// What the provider knows of a resource server: JWT access tokens for it, signed with `kid`,
// living `ttl`, holding scopes among `--scopes`.
function resourceServerInfo(resource, ttl, kid) {
  return {
    scope: opts.scopes,
    audience: resource,
    accessTokenTTL: ttl,
    accessTokenFormat: 'jwt',
    jwt: { sign: { alg: 'RS256', kid } },
  };
}
const allowedScopes = new Set(opts.scopes.split(' ').filter(Boolean));
// `act` claims to put in access tokens, by token (see `extraTokenClaims`).
const acts = new WeakMap();

// An OAuth error answer with a description of our own (some of the provider's error classes,
// `InvalidGrant` among them, keep theirs fixed).
function oauthError(Class, description) {
  return Object.assign(new Class(description), { error_description: description });
}

let keys = [newKey()];
let current;
let exchangeOn = true;
let exchanges = 0;

function answer(res, status, body) {
  res.statusCode = status;
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify(body));
}

async function readJson(req) {
  let text = '';
  for await (const chunk of req) text += chunk;
  return text.trim() === '' ? {} : JSON.parse(text);
}

// POST /admin/user-token: the access token an authorization code login of user `sub` through
// user client `client_id` for `resource` would give, issued by the provider's own AccessToken
// model (so shaped and signed as its other JWT access tokens). Answers [status, body].
async function userToken(req) {
  let body;
  try {
    body = await readJson(req);
  } catch (err) {
    return [400, { error: 'invalid_request', error_description: `body is not JSON: ${err.message}` }];
  }
  const {
    client_id: id, sub, resource, scope, ttl, act,
  } = body ?? {};
  if (!userTtl.has(id)) {
    return [400, { error: 'invalid_client', error_description: `client_id ${JSON.stringify(id)} is not a --user-client` }];
  }
  if (typeof sub !== 'string' || sub === '') {
    return [400, { error: 'invalid_request', error_description: 'sub must be a non-empty string' }];
  }
  if (!opts.resources.includes(resource)) {
    return [400, { error: 'invalid_target', error_description: `resource ${JSON.stringify(resource)} is not a --resource` }];
  }
  if (scope !== undefined && (typeof scope !== 'string'
    || !scope.split(' ').filter(Boolean).every((s) => allowedScopes.has(s)))) {
    return [400, { error: 'invalid_scope', error_description: `scope must be a string of scopes among "${opts.scopes}"` }];
  }
  if (ttl !== undefined && !(Number.isInteger(ttl) && ttl > 0)) {
    return [400, { error: 'invalid_request', error_description: 'ttl must be a positive integer (seconds)' }];
  }
  if (act !== undefined && (act === null || typeof act !== 'object' || Array.isArray(act))) {
    return [400, { error: 'invalid_request', error_description: 'act must be a JSON object' }];
  }

  // The provider and its signing key together (a rotation may come while this awaits).
  const [p, kid] = [current, keys[0].kid];
  const lifetime = ttl ?? userTtl.get(id);
  const token = new p.AccessToken({
    accountId: sub,
    client: await p.Client.find(id),
    gty: 'authorization_code',
    scope: scope?.split(' ').filter(Boolean).join(' ') || undefined,
    expiresIn: lifetime,
    resourceServer: new p.ResourceServer(resource, resourceServerInfo(resource, lifetime, kid)),
  });
  if (act !== undefined) acts.set(token, act);
  return [200, { access_token: await token.save(), expires_in: lifetime }];
}

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
  if (req.method === 'POST' && req.url === '/admin/user-token') {
    userToken(req).then(([status, body]) => answer(res, status, body), (err) => {
      process.stderr.write(`oidc_provider.mjs: /admin/user-token: ${err.stack}\n`);
      answer(res, 500, { error: 'server_error', error_description: err.message });
    });
    return;
  }
  if (req.method === 'GET' && req.url === '/admin/exchanges') {
    answer(res, 200, { count: exchanges });
    return;
  }
  if (req.method === 'POST' && (req.url === '/admin/exchange-off' || req.url === '/admin/exchange-on')) {
    exchangeOn = req.url === '/admin/exchange-on';
    answer(res, 200, { exchange: exchangeOn ? 'on' : 'off' });
    return;
  }
  current.callback()(req, res);
});
await new Promise((ok) => { server.listen(opts.port, '127.0.0.1', ok); });
const { port } = server.address();
const issuer = `http://127.0.0.1:${port}`;

// The token exchange grant (RFC 8693) of a provider signing with `signing`. The provider has
// authenticated the client and checked it may use the grant (ctx.oidc.client); the subject
// token is checked here against the keys published now, and the new token is issued by the
// provider's AccessToken model.
function tokenExchange(signing) {
  return async function tokenExchangeHandler(ctx) {
    const { client, params, provider: p } = ctx.oidc;
    if (!exchangeOn) throw oauthError(errors.InvalidGrant, 'exchange switched off by the test');

    if (!params.subject_token) throw new errors.InvalidRequest('missing required parameter subject_token');
    if (!params.subject_token_type) throw new errors.InvalidRequest('missing required parameter subject_token_type');
    if (![ACCESS_TOKEN_TYPE, JWT_TOKEN_TYPE].includes(params.subject_token_type)) {
      throw new errors.InvalidRequest(`unsupported subject_token_type, use ${ACCESS_TOKEN_TYPE} or ${JWT_TOKEN_TYPE}`);
    }
    if (params.requested_token_type !== undefined
      && ![ACCESS_TOKEN_TYPE, JWT_TOKEN_TYPE].includes(params.requested_token_type)) {
      throw new errors.InvalidRequest(`unsupported requested_token_type, only ${ACCESS_TOKEN_TYPE} is issued`);
    }
    // `actor_token` (and `actor_token_type`) is accepted and ignored: the actor of the new
    // token is the subject token's client, not whoever an actor token names.

    let claims;
    try {
      const published = createLocalJWKSet({
        keys: keys.map(({
          kty, n, e, kid, use, alg,
        }) => ({
          kty, n, e, kid, use, alg,
        })),
      });
      ({ payload: claims } = await jwtVerify(params.subject_token, published, {
        issuer, algorithms: ['RS256'], requiredClaims: ['exp'],
      }));
    } catch (err) {
      throw oauthError(errors.InvalidGrant, `subject_token rejected: ${err.message}`);
    }
    const actor = claims.client_id ?? claims.azp;
    if (typeof claims.sub !== 'string' || typeof actor !== 'string') {
      throw oauthError(errors.InvalidGrant, 'subject_token lacks sub, or client_id and azp');
    }

    // The target: one `resource` (RFC 8707), else one `audience`, among `--resource`.
    const target = params.resource ?? params.audience;
    if (Array.isArray(target)) {
      throw new errors.InvalidTarget('only a single resource (or audience) value is supported');
    }
    if (!opts.resources.includes(target)) {
      throw new errors.InvalidTarget(target === undefined
        ? 'resource (or audience) is missing'
        : `${params.resource !== undefined ? 'resource' : 'audience'} is not a known resource server`);
    }

    const wanted = params.scope ?? (typeof claims.scope === 'string' ? claims.scope : '');
    const scope = [...new Set(wanted.split(' '))].filter((s) => allowedScopes.has(s)).join(' ') || undefined;
    const ttl = exchangeTtl.get(client.clientId) ?? 300;
    const token = new p.AccessToken({
      accountId: claims.sub,
      client,
      gty: TOKEN_EXCHANGE,
      scope,
      expiresIn: ttl,
      resourceServer: new p.ResourceServer(target, resourceServerInfo(target, ttl, signing)),
    });
    acts.set(token, { sub: actor, ...(claims.act !== undefined ? { act: claims.act } : undefined) });
    ctx.oidc.entity('AccessToken', token);
    const value = await token.save();

    exchanges += 1;
    ctx.body = {
      access_token: value,
      issued_token_type: ACCESS_TOKEN_TYPE,
      token_type: 'Bearer',
      expires_in: ttl,
      ...(scope ? { scope } : undefined),
    };
  };
}

// A provider publishing `keys` and signing with the first; rebuilt on each change of keys
// (clients and resource servers are static, and every access token is a JWT, so nothing held
// is lost).
function provider() {
  const signing = keys[0].kid;
  const p = new Provider(issuer, {
    clients,
    jwks: { keys },
    // The `act` of user and exchanged tokens (nothing for the others).
    extraTokenClaims: (_ctx, token) => (acts.has(token) ? { act: acts.get(token) } : undefined),
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
          return resourceServerInfo(resourceIndicator, ccTtl.get(client.clientId) ?? 300, signing);
        },
      },
    },
  });
  p.registerGrantType(TOKEN_EXCHANGE, tokenExchange(signing), [
    'subject_token', 'subject_token_type', 'actor_token', 'actor_token_type',
    'requested_token_type', 'audience', 'resource', 'scope',
  ], ['audience', 'resource']);
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
