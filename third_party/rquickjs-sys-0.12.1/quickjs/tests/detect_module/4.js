// imports should classify it as a module, even when not at the top
os.now()
import * as os from "qjs:os"
