# Writes IN as a NUL-terminated C array named vram_catalogue_json into OUT.
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
file(WRITE ${OUT} "/* generated from proto/messages.json */\nconst char vram_catalogue_json[] = {${body}0x00};\n")
