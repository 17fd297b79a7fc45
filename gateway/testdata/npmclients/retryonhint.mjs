// Measures how often a client retrying on the gateway's hint is refused
// again: <callers> clients of one SDK each make <calls> calls as fast as
// a rate rule lets them, retrying (up to 20 times) as the SDK does.
// Prints one JSON line: {client, retries, refusedAgain, failed}.
// Usage: node retryonhint.mjs <baseURL> <key> <model> <openai-node|anthropic-node> <callers> <calls>
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const [base, key, model, client, callers, calls] = process.argv.slice(2);
let retries = 0, refusedAgain = 0, failed = 0;

// The SDKs number their attempts in x-stainless-retry-count.
const counting = async (url, init) => {
  const h = new Headers(init?.headers);
  const retry = (h.get('x-stainless-retry-count') ?? '0') !== '0';
  const resp = await fetch(url, init);
  if (retry) {
    retries++;
    if (resp.status === 429) refusedAgain++;
  }
  return resp;
};

const make = {
  'openai-node': () => {
    const c = new OpenAI({ baseURL: base + '/v1', apiKey: key, maxRetries: 20, fetch: counting });
    return () => c.chat.completions.create({ model, max_tokens: 4, messages: [{ role: 'user', content: 'hi [mock tokens=1]' }] });
  },
  'anthropic-node': () => {
    const c = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 20, fetch: counting });
    return () => c.messages.create({ model, max_tokens: 4, messages: [{ role: 'user', content: 'hi [mock tokens=1]' }] });
  },
}[client];

await Promise.all(Array.from({ length: Number(callers) }, async () => {
  const call = make();
  for (let i = 0; i < Number(calls); i++) {
    try { await call(); } catch { failed++; }
  }
}));
console.log(JSON.stringify({ client, retries, refusedAgain, failed }));
