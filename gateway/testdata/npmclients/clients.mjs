// Calls a gateway (or any server) once with each real client and prints,
// per client, one JSON line: {client, ok, status, error, ms}.
// Usage: node clients.mjs <baseURL> <key> <model> [client ...]
// The clients retry as they do out of the box (no maxRetries set), so the
// server sees every retry they make.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { generateText } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';

const [base, key, model, ...only] = process.argv.slice(2);
const prompt = 'hello';

const clients = {
  'openai-node': async () => {
    const c = new OpenAI({ baseURL: base + '/v1', apiKey: key });
    await c.chat.completions.create({ model, max_tokens: 16, messages: [{ role: 'user', content: prompt }] });
  },
  'anthropic-node': async () => {
    const c = new Anthropic({ baseURL: base, apiKey: key });
    await c.messages.create({ model, max_tokens: 16, messages: [{ role: 'user', content: prompt }] });
  },
  'ai-sdk-openai': async () => {
    const p = createOpenAI({ baseURL: base + '/v1', apiKey: key });
    await generateText({ model: p.chat(model), prompt, maxOutputTokens: 16 });
  },
  'ai-sdk-anthropic': async () => {
    const p = createAnthropic({ baseURL: base + '/v1', apiKey: key });
    await generateText({ model: p(model), prompt, maxOutputTokens: 16 });
  },
  'ai-sdk-openai-compatible': async () => {
    const p = createOpenAICompatible({ name: 'sluice', baseURL: base + '/v1', apiKey: key });
    await generateText({ model: p(model), prompt, maxOutputTokens: 16 });
  },
};

for (const [name, call] of Object.entries(clients)) {
  if (only.length && !only.includes(name)) continue;
  const start = Date.now();
  try {
    await call();
    console.log(JSON.stringify({ client: name, ok: true, ms: Date.now() - start }));
  } catch (e) {
    const status = e.status ?? e.statusCode ?? e.lastError?.statusCode ?? null;
    console.log(JSON.stringify({ client: name, ok: false, status, error: String(e.name ?? e) + ': ' + String(e.message).slice(0, 200), ms: Date.now() - start }));
  }
}
