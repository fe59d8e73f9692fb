#!/usr/bin/env node
// Validate .tldr files with tldraw's MIT packages (@tldraw/tlschema, store, validate).
// Test-only: the product writes .tldr JSON from Python and never runs tldraw code.
//
// usage: node validate-tldr.cjs [--strict] FILE...
// Exit 0 when every file is valid (one "ok" line each), 1 on the first invalid
// file (one "invalid FILE: reason" line on stderr), 2 on usage errors.
'use strict'

const fs = require('node:fs')
const { createTLSchema } = require('@tldraw/tlschema')
const { Store } = require('@tldraw/store')
const { T } = require('@tldraw/validate')

const LATEST_FILE_FORMAT = 1

const fileValidator = T.object({
  tldrawFileFormatVersion: T.nonZeroInteger,
  schema: T.object({
    schemaVersion: T.literal(2),
    sequences: T.dict(T.string, T.positiveInteger),
  }),
  records: T.arrayOf(
    T.object({ id: T.string, typeName: T.string }).allowUnknownProperties()
  ),
})

function sequenceFor(record) {
  if (record.typeName === 'shape') return `com.tldraw.shape.${record.type}`
  if (record.typeName === 'binding') return `com.tldraw.binding.${record.type}`
  return `com.tldraw.${record.typeName}`
}

function check(text, strict) {
  let file
  try {
    file = JSON.parse(text)
  } catch (err) {
    throw new Error(`not JSON: ${err.message}`)
  }
  fileValidator.validate(file)
  if (file.tldrawFileFormatVersion > LATEST_FILE_FORMAT) {
    throw new Error(`fileFormatVersionTooNew: ${file.tldrawFileFormatVersion}`)
  }
  const sequences = file.schema.sequences
  if (strict) {
    for (const id of ['com.tldraw.store', 'com.tldraw.shape']) {
      if (!(id in sequences)) throw new Error(`strict: schema does not declare ${id}`)
    }
    for (const record of file.records) {
      const id = sequenceFor(record)
      if (!(id in sequences)) throw new Error(`strict: schema does not declare ${id}`)
    }
  }
  const store = {}
  for (const record of file.records) {
    if (record.id in store) throw new Error(`duplicate id ${record.id}`)
    store[record.id] = record
  }
  const schema = createTLSchema()
  const migrated = schema.migrateStoreSnapshot({ store, schema: file.schema })
  if (migrated.type === 'error') throw new Error(`migrationFailed: ${migrated.reason}`)
  const records = migrated.value

  // Validates every record in its "initialize" phase; throws with a path on failure.
  const tlstore = new Store({
    schema,
    initialData: records,
    props: {
      defaultName: '',
      assets: { upload: async () => ({ src: '' }), resolve: async () => null, remove: async () => {} },
      users: { currentUser: null },
      onMount() {},
    },
  })

  const all = Object.values(records)
  const byId = new Map(all.map((r) => [r.id, r]))
  if (!all.some((r) => r.typeName === 'document')) throw new Error('no document record')
  if (!all.some((r) => r.typeName === 'page')) throw new Error('no page record')
  for (const r of all) {
    if (r.typeName === 'shape' && !byId.has(r.parentId)) {
      throw new Error(`${r.id}: parent ${r.parentId} does not exist`)
    }
  }
  const terminals = new Set()
  for (const r of all) {
    if (r.typeName !== 'binding') continue
    const from = byId.get(r.fromId)
    if (!from || from.typeName !== 'shape' || from.type !== 'arrow') {
      throw new Error(`${r.id}: fromId ${r.fromId} is not an arrow shape`)
    }
    if (!byId.has(r.toId)) throw new Error(`${r.id}: toId ${r.toId} does not exist`)
    const key = `${r.fromId}/${r.props.terminal}`
    if (terminals.has(key)) throw new Error(`${r.id}: second binding for ${key}`)
    terminals.add(key)
  }
  tlstore.ensureStoreIsUsable()
  const count = (t) => all.filter((r) => r.typeName === t).length
  return `${all.length} records, ${count('shape')} shapes, ${count('binding')} bindings`
}

function main(argv) {
  const strict = argv.includes('--strict')
  const files = argv.filter((a) => a !== '--strict')
  if (files.length === 0) {
    process.stderr.write('usage: validate-tldr.cjs [--strict] FILE...\n')
    return 2
  }
  for (const path of files) {
    try {
      const summary = check(fs.readFileSync(path, 'utf8'), strict)
      process.stdout.write(`ok ${path}: ${summary}\n`)
    } catch (err) {
      process.stderr.write(`invalid ${path}: ${String(err && err.message ? err.message : err).split('\n')[0]}\n`)
      return 1
    }
  }
  return 0
}

process.exitCode = main(process.argv.slice(2))
