//! `gantry-example`: the example MCP server (crate `gantry-example`), built here so
//! that it lands next to `gantry` and Gantry's tests find it.

fn main() -> anyhow::Result<()> {
    gantry_example::cli::main()
}
