"""Context-extension formulas: RoPE frequency rescalings and position remappings."""
