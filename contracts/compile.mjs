// Compiles every contracts/*.sol with solc-js (the version pinned in package.json)
// into contracts/build/<Contract>.json: ABI, creation and runtime bytecode; and,
// from the packages that publish them (node_modules, as npm installed them),
// the published contracts the local world runs as they are: Multicall3, from
// @chainlink/contracts' vendored copy of its source (the local chains carry its
// runtime code at the address it has on every public network).
// Usage: node contracts/compile.mjs [outdir]   (default: contracts/build)
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import solc from 'solc'

const here = path.dirname(fileURLToPath(import.meta.url))
const outDir = path.resolve(process.argv[2] ?? path.join(here, 'build'))

const sources = {}
for (const file of fs.readdirSync(here).filter((f) => f.endsWith('.sol')).sort()) {
  sources[file] = { content: fs.readFileSync(path.join(here, file), 'utf8') }
}
const PUBLISHED = ['@chainlink/contracts/src/v0.8/vendor/multicall/ebd8b64/src/Multicall3.sol']
for (const file of PUBLISHED) {
  sources[file] = { content: fs.readFileSync(path.join(here, '..', 'node_modules', file), 'utf8') }
}

const input = {
  language: 'Solidity',
  sources,
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: 'cancun',
    // no metadata hash: the bytecode then depends on the source text alone
    metadata: { bytecodeHash: 'none', appendCBOR: false },
    outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object', 'evm.deployedBytecode.object'] } },
  },
}

const output = JSON.parse(solc.compile(JSON.stringify(input)))
const errors = (output.errors ?? []).filter((e) => e.severity === 'error')
for (const e of output.errors ?? []) console.error(e.formattedMessage)
if (errors.length > 0) process.exit(1)

fs.mkdirSync(outDir, { recursive: true })
for (const [file, contracts] of Object.entries(output.contracts)) {
  for (const [name, c] of Object.entries(contracts)) {
    const artifact = {
      contractName: name,
      sourceName: file,
      compiler: `solc-js ${solc.version()}`,
      abi: c.abi,
      bytecode: '0x' + c.evm.bytecode.object,
      deployedBytecode: '0x' + c.evm.deployedBytecode.object,
    }
    fs.writeFileSync(path.join(outDir, `${name}.json`), JSON.stringify(artifact, null, 2) + '\n')
    console.log(`${path.relative(process.cwd(), path.join(outDir, name + '.json'))}`)
  }
}
