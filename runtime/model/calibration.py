"""Calibration texts of the INT8 text encoder (SmoothQuant scales, see ``encoders.smooth_quantize``).

67 texts of 5 to 230 words: paragraphs, and runs of paragraphs, of the docstrings of CPython 3.11's ``argparse``,
``logging``, ``subprocess``, ``threading``, ``json``, ``csv``, ``sqlite3``, ``zipfile``, ``tarfile``, ``shutil``,
``email.message`` and ``http.client`` modules and of the classes and functions they define (Python Software
Foundation License). Fixed here, not read at start-up, so every machine computes the same scales. Fidelity is
measured on texts of other modules (``modalscale.runtime.workload.fidelity_texts``), disjoint from these.

Below them, the calibration images of the INT8 image encoder (``ov_engine.image_encoder_int8``): fixed crops of
scikit-image photographs that are not in the fidelity set (:func:`calibration_image_crops`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

CALIBRATION_TEXTS: tuple[str, ...] = (
    "This module is an optparse-inspired command-line parsing library that:",
    "Information about how to convert command line strings to Python objects.",
    "The string value of this exception is the message, augmented with information about the argument that caused it.",
    ("Keyword Arguments: - mode -- A string indicating how the file is to be opened. Accepts the same values as the "
     "builtin open() function. - bufsize -- The file's desired buffer size. Accepts the same values as the builtin "
     "open() function. - encoding -- The file's encoding. Accepts the same values as the builtin open() function. - "
     "errors -- A string indicating how encoding and decoding errors are to be handled. Accepts the same value as the "
     "builtin open() function."),
    ("All other classes in this module are considered implementation details. (Also note that HelpFormatter and "
     "RawDescriptionHelpFormatter are only considered public as object names -- the API of the formatter objects is "
     "still considered an implementation detail.) Information about how to convert command line strings to Python "
     "objects. Action objects are used by an ArgumentParser to represent the information needed to parse a single "
     "argument from one or more strings from the command line. The keyword arguments to the Action constructor are "
     "also all attributes of Action instances. Help message formatter which adds default values to argument help. "
     "Only the name of this class is considered a public API. All the methods provided by the class are considered an "
     "implementation detail. An error from creating or using an argument (optional or positional)."),
    ("The string value of this exception is the message, augmented with information about the argument that caused "
     "it. Object for parsing command line strings into Python objects. Keyword Arguments: - prog -- The name of the "
     "program (default: ``os.path.basename(sys.argv[0])``) - usage -- A usage message (default: auto-generated from "
     "arguments) - description -- A description of what the program does - epilog -- Text following the argument "
     "descriptions - parents -- Parsers whose arguments should be copied into this one - formatter_class -- "
     "HelpFormatter class for printing help messages - prefix_chars -- Characters that prefix optional arguments - "
     "fromfile_prefix_chars -- Characters that prefix files containing additional arguments - argument_default -- The "
     "default value for all arguments - conflict_handler -- String indicating how to handle conflicts - add_help -- "
     "Add a -h/-help option - allow_abbrev -- Allow long options to be abbreviated unambiguously - exit_on_error -- "
     "Determines whether or not ArgumentParser exits with error info when an error occurs An error from trying to "
     "convert a command line string to a type. Instances of FileType are typically passed as type= arguments to the "
     "ArgumentParser add_argument() method. Keyword Arguments: - mode -- A string indicating how the file is to be "
     "opened. Accepts the same values as the builtin open() function. - bufsize -- The file's desired buffer size. "
     "Accepts the same values as the builtin open() function. - encoding -- The file's"),
    "Logging package for Python. Based on PEP 282 and comments thereto in comp.lang.python.",
    "A LogRecord instance represents an event being logged.",
    "A number of optional keyword arguments may be specified, which can alter the default behaviour.",
    "If a string representation of the level is passed in, the corresponding numeric value is returned.",
    ("Filter instances are used to perform arbitrary filtering of LogRecords. Loggers and Handlers can optionally use "
     "Filter instances to filter records as desired. The base filter class only allows events which are below a "
     "certain point in the logger hierarchy. For example, a filter initialized with \"A.B\" will allow events logged "
     "by loggers \"A.B\", \"A.B.C\", \"A.B.C.D\", \"A.B.D\" etc. but not \"A.BB\", \"B.A.B\" etc. If initialized with "
     "the empty string, all events are passed. A base class for loggers and handlers which allows them to share "
     "common code. Formatter instances are used to convert a LogRecord to text. Formatters need to know how a "
     "LogRecord is constructed. They are responsible for converting a LogRecord to (usually) a string which can be "
     "interpreted by either a human or an external system. The base Formatter allows a formatting string to be "
     "specified. If none is supplied, the style-dependent default value, \"%(message)s\", \"{message}\", or "
     "\"${message}\", is used. The Formatter can be initialized with a format string which makes use of knowledge of "
     "the LogRecord attributes - e.g. the default value mentioned above makes use of the fact that the user's message "
     "and arguments are pre- formatted into a LogRecord's message attribute. Currently, the useful attributes in a "
     "LogRecord are described by:"),
    ("%(name)s Name of the logger (logging channel) %(levelno)s Numeric logging level for the message (DEBUG, INFO, "
     "WARNING, ERROR, CRITICAL) %(levelname)s Text logging level for the message (\"DEBUG\", \"INFO\", \"WARNING\", "
     "\"ERROR\", \"CRITICAL\") %(pathname)s Full pathname of the source file where the logging call was issued (if "
     "available) %(filename)s Filename portion of pathname %(module)s Module (name portion of filename) %(lineno)d "
     "Source line number where the logging call was issued (if available) %(funcName)s Function name %(created)f Time "
     "when the LogRecord was created (time.time() return value) %(asctime)s Textual time when the LogRecord was "
     "created %(msecs)d Millisecond portion of the creation time %(relativeCreated)d Time in milliseconds when the "
     "LogRecord was created, relative to the time the logging module was loaded (typically at application startup "
     "time) %(thread)d Thread ID (if available) %(threadName)s Thread name (if available) %(process)d Process ID (if "
     "available) %(message)s The result of record.getMessage(), computed just as the record is emitted Handler "
     "instances dispatch logging events to specific destinations. The base handler class. Acts as a placeholder which "
     "defines the Handler interface. Handlers can optionally use Formatter instances to format records as desired. By "
     "default, no formatter is specified; in this case, the 'raw' message as determined by record.message is logged. "
     "A LogRecord instance represents an event being logged. LogRecord instances are created every time something is "
     "logged. They contain all the information pertinent to the event being logged. The main information passed in"),
    "Subprocesses with accessible I/O streams",
    "executable: A replacement program to execute.",
    "This exception is raised when the timeout expires while waiting for a child process.",
    "Return (exitcode, output) of executing cmd in a shell.",
    ("Constants --------- DEVNULL: Special value that indicates that os.devnull should be used PIPE: Special value "
     "that indicates a pipe should be created STDOUT: Special value that indicates that stderr should go to stdout "
     "Older API ========= call(...): Runs a command, waits for it to complete, then returns the return code. "
     "check_call(...): Same as call() but raises CalledProcessError() if return code is not 0 check_output(...): Same "
     "as check_call() but returns the contents of stdout instead of a return code getoutput(...): Runs a command in "
     "the shell, waits for it to complete, then returns the output getstatusoutput(...): Runs a command in the shell, "
     "waits for it to complete, then returns a (exitcode, output) tuple Raised when run() is called with check=True "
     "and the process returns a non-zero exit status. Attributes: cmd, returncode, stdout, stderr, output Attributes: "
     "args: The list or str args passed to run(). returncode: The exit code of the process, negative for signals. "
     "stdout: The standard output (None if not captured). stderr: The standard error (None if not captured). Execute "
     "a child program in a new process."),
    ("For a complete description of the arguments see the Python documentation. Arguments: args: A string, or a "
     "sequence of program arguments. bufsize: supplied as the buffering argument to the open() function when creating "
     "the stdin/stdout/stderr pipe file objects executable: A replacement program to execute. stdin, stdout and "
     "stderr: These specify the executed programs' standard input, standard output and standard error file handles, "
     "respectively. preexec_fn: (POSIX only) An object to be called in the child process just before the child is "
     "executed. close_fds: Controls closing or inheriting of file descriptors. shell: If true, the command will be "
     "executed through the shell. cwd: Sets the current directory before the child is executed. env: Defines the "
     "environment variables for the new process. text: If true, decode stdin, stdout and stderr using the given "
     "encoding (if set) or the system default otherwise. universal_newlines: Alias of text, provided for backwards "
     "compatibility. startupinfo and creationflags (Windows only) encoding and errors: Text mode encoding and error "
     "handling to use for file objects stdin, stdout and stderr. Attributes: stdin, stdout, stderr, pid, returncode "
     "Common base class for all non-exit exceptions. This exception is raised when the timeout expires while waiting "
     "for a child process. Attributes: cmd, output, stdout, stderr, timeout Run command with arguments. Wait for "
     "command to complete or timeout, then return the returncode attribute. The arguments are the same as for the "
     "Popen constructor. Example:"),
    "Thread module emulating a subset of Java's threading model.",
    ("If the lock argument is given and not None, it must be a Lock or RLock object, and it is used as the underlying "
     "lock. Otherwise, a new RLock object is created and used as the underlying lock."),
    ("This class can be safely subclassed in a limited fashion. There are two ways to specify the activity: by "
     "passing a callable object to the constructor, or by overriding the run() method in a subclass."),
    ("If the caller's thread of control was not created through the threading module, a dummy thread object with "
     "limited functionality is returned."),
    ("Like regular semaphores, bounded semaphores manage a counter representing the number of release() calls minus "
     "the number of acquire() calls, plus an initial value. The acquire() method blocks if necessary until it can "
     "return without making the counter negative. If not given, value defaults to 1. Class that implements a "
     "condition variable. A condition variable allows one or more threads to wait until they are notified by another "
     "thread. If the lock argument is given and not None, it must be a Lock or RLock object, and it is used as the "
     "underlying lock. Otherwise, a new RLock object is created and used as the underlying lock. Events manage a flag "
     "that can be set to true with the set() method and reset to false with the clear() method. The wait() method "
     "blocks until the flag is true. The flag is initially false. Factory function that returns a new reentrant lock."),
    ("A reentrant lock must be released by the thread that acquired it. Once a thread has acquired a reentrant lock, "
     "the same thread may acquire it again without blocking; the thread must release it once for each time it has "
     "acquired it. This class implements semaphore objects. Semaphores manage a counter representing the number of "
     "release() calls minus the number of acquire() calls, plus an initial value. The acquire() method blocks if "
     "necessary until it can return without making the counter negative. If not given, value defaults to 1. A class "
     "that represents a thread of control. This class can be safely subclassed in a limited fashion. There are two "
     "ways to specify the activity: by passing a callable object to the constructor, or by overriding the run() "
     "method in a subclass. Call a function after a specified number of seconds: Return the number of Thread objects "
     "currently alive. This function is deprecated, use active_count() instead. The returned count is equal to the "
     "length of the list returned by enumerate(). Return the current Thread object, corresponding to the caller's "
     "thread of control. This function is deprecated, use current_thread() instead. If the caller's thread of control "
     "was not created through the threading module, a dummy thread object with limited functionality is returned. "
     "Return a list of all Thread objects currently alive. The list includes daemonic threads, dummy thread objects "
     "created by"),
    ("JSON (JavaScript Object Notation) <https://json.org> is a subset of JavaScript syntax (ECMA-262 3rd edition) "
     "used as a lightweight data interchange format."),
    ("If ``ensure_ascii`` is false, then the strings written to ``fp`` can contain non-ASCII characters if they "
     "appear in strings contained in ``obj``. Otherwise, all such characters are escaped in JSON strings."),
    "If *sort_keys* is true (default: ``False``), then the output of dictionaries will be sorted by key.",
    ("``object_hook`` is an optional function that will be called with the result of any object literal decode (a "
     "``dict``). The return value of ``object_hook`` will be used instead of the ``dict``. This feature can be used "
     "to implement custom decoders (e.g. JSON-RPC class hinting)."),
    ("If ``ensure_ascii`` is false, then the strings written to ``fp`` can contain non-ASCII characters if they "
     "appear in strings contained in ``obj``. Otherwise, all such characters are escaped in JSON strings. If "
     "``check_circular`` is false, then the circular reference check for container types will be skipped and a "
     "circular reference will result in an ``RecursionError`` (or worse). If ``indent`` is a non-negative integer, "
     "then JSON array elements and object members will be pretty-printed with that indent level. An indent level of 0 "
     "will only insert newlines. ``None`` is the most compact representation. ``default(obj)`` is a function that "
     "should return a serializable version of obj or raise TypeError. The default simply raises TypeError. If "
     "*sort_keys* is true (default: ``False``), then the output of dictionaries will be sorted by key. To use a "
     "custom ``JSONEncoder`` subclass (e.g. one that overrides the ``.default()`` method to serialize additional "
     "types), specify it with the ``cls`` kwarg; otherwise ``JSONEncoder`` is used."),
    ("If ``ensure_ascii`` is false, then the return value can contain non-ASCII characters if they appear in strings "
     "contained in ``obj``. Otherwise, all such characters are escaped in JSON strings. Deserialize ``fp`` (a "
     "``.read()``-supporting file-like object containing a JSON document) to a Python object. ``object_hook`` is an "
     "optional function that will be called with the result of any object literal decode (a ``dict``). The return "
     "value of ``object_hook`` will be used instead of the ``dict``. This feature can be used to implement custom "
     "decoders (e.g. JSON-RPC class hinting). ``object_pairs_hook`` is an optional function that will be called with "
     "the result of any object literal decoded with an ordered list of pairs. The return value of "
     "``object_pairs_hook`` will be used instead of the ``dict``. This feature can be used to implement custom "
     "decoders. If ``object_hook`` is also defined, the ``object_pairs_hook`` takes priority. To use a custom "
     "``JSONDecoder`` subclass, specify it with the ``cls`` kwarg; otherwise ``JSONDecoder`` is used. "
     "``parse_float``, if specified, will be called with the string of every JSON float to be decoded. By default "
     "this is equivalent to float(num_str). This can be used to use another datatype or parser for JSON floats (e.g. "
     "decimal.Decimal). ``parse_int``, if specified, will be called with the string of every JSON int to be decoded. "
     "By default this is equivalent to int(num_str). This can be used to use another datatype or parser for JSON "
     "integers"),
    ("This module provides classes that assist in the reading and writing of Comma Separated Value (CSV) files, and "
     "implements the interface described by PEP 305. Although many CSV files are simple to parse, the format is not "
     "formally defined by a stable specification and is subtle enough that parsing lines of a CSV file with something "
     "like line.split(\",\") is bound to fail. The module supports three basic APIs: reading, writing, and "
     "registration of dialects."),
    ("class excel: delimiter = ',' quotechar = '\"' escapechar = None doublequote = True skipinitialspace = False "
     "lineterminator = '\\r\\n' quoting = QUOTE_MINIMAL"),
    ("csv.QUOTE_MINIMAL means only when required, for example, when a field contains either the quotechar or the "
     "delimiter csv.QUOTE_ALL means that quotes are always placed around fields. csv.QUOTE_NONNUMERIC means that "
     "quotes are always placed around fields which do not parse as integers or floating point numbers. csv.QUOTE_NONE "
     "means that quotes are never placed around fields. * escapechar - specifies a one-character string used to "
     "escape the delimiter when quoting is set to QUOTE_NONE. * doublequote - controls the handling of quotes inside "
     "fields. When True, two consecutive quotes are interpreted as one during read, and when writing, each quote "
     "character embedded in the data is written as two quotes"),
    "\"Sniffs\" the format of a CSV file (i.e. delimiter, quotechar) Returns a Dialect object.",
    ("csv.QUOTE_MINIMAL means only when required, for example, when a field contains either the quotechar or the "
     "delimiter csv.QUOTE_ALL means that quotes are always placed around fields. csv.QUOTE_NONNUMERIC means that "
     "quotes are always placed around fields which do not parse as integers or floating point numbers. csv.QUOTE_NONE "
     "means that quotes are never placed around fields. * escapechar - specifies a one-character string used to "
     "escape the delimiter when quoting is set to QUOTE_NONE. * doublequote - controls the handling of quotes inside "
     "fields. When True, two consecutive quotes are interpreted as one during read, and when writing, each quote "
     "character embedded in the data is written as two quotes This must be subclassed (see csv.excel). Valid "
     "attributes are: delimiter, quotechar, escapechar, doublequote, skipinitialspace, lineterminator, quoting. "
     "\"Sniffs\" the format of a CSV file (i.e. delimiter, quotechar) Returns a Dialect object. Describe the usual "
     "properties of Excel-generated CSV files. Describe the usual properties of Excel-generated TAB-delimited files. "
     "Describe the usual properties of Unix-generated CSV files."),
    ("The sqlite3 extension module provides a DB-API 2.0 (PEP 249) compliant interface to the SQLite library, and "
     "requires SQLite 3.7.15 or newer."),
    "import sqlite3 cx = sqlite3.connect(\"test.db\") # test.db will be created or opened",
    ("Once a connection has been established, create a Cursor object and call its execute() method to perform SQL "
     "queries:"),
    "# execute a query and iterate over the result for row in cu.execute(\"select * from lang\"): print(row)",
    ("Once a connection has been established, create a Cursor object and call its execute() method to perform SQL "
     "queries: # create a table cu.execute(\"create table lang(name, first_appeared)\") # execute a query and iterate "
     "over the result for row in cu.execute(\"select * from lang\"): print(row) The sqlite3 module is written by "
     "Gerhard H\u00e4ring <gh@ghaering.de>. Common base class for all non-exit exceptions. PEP 246 style object "
     "adaption protocol type."),
    "XXX references to utf-8 need further investigation.",
    "Raised when writing a zipfile, the zipfile requires ZIP64 extensions and those extensions are disabled.",
    "From there, several path operations are available.",
    "File-like object for reading an archive member. Is returned by ZipFile.open().",
    ("Raised when writing a zipfile, the zipfile requires ZIP64 extensions and those extensions are disabled. A "
     "pathlib-compatible interface for zip files. Consider a zip file with this structure:: Path accepts the zipfile "
     "object itself or a filename From there, several path operations are available. Directory iteration (including "
     "the zip file itself):"),
    ("At the root, ``name``, ``filename``, and ``parent`` resolve to the zipfile. Note these attributes are not valid "
     "and will raise a ``ValueError`` if the zipfile has no filename. Class to create ZIP archives with Python "
     "library files and packages. File-like object for reading an archive member. Is returned by ZipFile.open(). "
     "Class with methods to open, read, write, close, list zip files. z = ZipFile(file, mode=\"r\", "
     "compression=ZIP_STORED, allowZip64=True, compresslevel=None) file: Either the path to the file, or a file-like "
     "object. If it is a path, the file will be opened and closed by ZipFile. mode: The mode can be either read 'r', "
     "write 'w', exclusive create 'x', or append 'a'. compression: ZIP_STORED (no compression), ZIP_DEFLATED "
     "(requires zlib), ZIP_BZIP2 (requires bz2) or ZIP_LZMA (requires lzma). allowZip64: if True ZipFile will create "
     "files with ZIP64 extensions when needed, otherwise it will raise an exception when this would be necessary. "
     "compresslevel: None (default for the given compression type) or an integer specifying the level to pass to the "
     "compressor. When using ZIP_STORED or ZIP_LZMA this keyword has no effect. When using ZIP_DEFLATED integers 0 "
     "through 9 are accepted. When using ZIP_BZIP2 integers 1 through 9 are accepted. Class with attributes "
     "describing each file in the ZIP archive. Quickly see if a file is a ZIP file by checking the magic number. The "
     "filename argument may be a file or file-like object too."),
    "Read from and write to tar format archives.",
    "Exception for missing and invalid extended headers.",
    "Copy length bytes from fileobj src to fileobj dst. If length is None, copy the entire content.",
    "Convert a number field to a python number.",
    ("Exception for missing and invalid extended headers. The TarFile Class provides an interface to tar archives. "
     "Informational class which holds the details about an archive member given by a tar header block. TarInfo "
     "objects are returned by TarFile.getmember(), TarFile.getmembers() and TarFile.gettarinfo() and are usually "
     "created internally. Calculate the checksum for a member's header by summing up all characters except for the "
     "chksum field which is treated as if it was filled with spaces. According to the GNU tar sources, some tars (Sun "
     "and NeXT) calculate chksum with signed char, which will be different if there are chars in the buffer with the "
     "high bit set. So we calculate two checksums, unsigned and signed. Copy length bytes from fileobj src to fileobj "
     "dst. If length is None, copy the entire content. Return True if name points to a tar archive that we are able "
     "to handle, else return False."),
    ("'name' should be a string, file, or file-like object. Convert a python number to a number field. Convert a "
     "number field to a python number. Convert a null-terminated bytes object to a string. Open a tar archive for "
     "reading, writing or appending. Return an appropriate TarFile class. mode: 'r' or 'r:*' open for reading with "
     "transparent compression 'r:' open for reading exclusively uncompressed 'r:gz' open for reading with gzip "
     "compression 'r:bz2' open for reading with bzip2 compression 'r:xz' open for reading with lzma compression 'a' "
     "or 'a:' open for appending, creating the file if necessary 'w' or 'w:' open for writing without compression "
     "'w:gz' open for writing with gzip compression 'w:bz2' open for writing with bzip2 compression 'w:xz' open for "
     "writing with lzma compression 'x' or 'x:' create a tarfile exclusively without compression, raise an exception "
     "if the file is already created 'x:gz' create a gzip compressed tarfile, raise an exception if the file is "
     "already created 'x:bz2' create a bzip2 compressed tarfile, raise an exception if the file is already created "
     "'x:xz' create an lzma compressed tarfile, raise an exception if the file is already created 'r|*' open a stream "
     "of tar blocks with transparent compression 'r|' open an uncompressed stream of tar blocks for reading 'r|gz' "
     "open a gzip compressed stream of tar blocks 'r|bz2' open a bzip2 compressed stream of tar blocks 'r|xz' open an "
     "lzma compressed"),
    "Utility functions for copying and archiving files and directory trees.",
    "copy data from file-like object fsrc to file-like object fdst",
    "Each element of the returned sequence is a tuple (name, description)",
    ("If the destination already exists but is not a directory, it may be overwritten depending on os.rename() "
     "semantics."),
    ("Raised when source and destination are the same file. Raised when trying to do a kind of operation (e.g. "
     "copying) which is not supported on a special file (e.g. a named pipe) Change owner user and group of the given "
     "path. user and group can be the uid/gid or the user/group names, and in that case, they are converted to their "
     "respective uid/gid. Copy data and mode bits (\"cp src dst\"). Return the file's destination. If follow_symlinks "
     "is false, symlinks won't be followed. This resembles GNU's \"cp -P src dst\"."),
    ("If source and destination are the same file, a SameFileError will be raised. Copy data and metadata. Return the "
     "file's destination. Metadata is copied with copystat(). Please see the copystat function for more information. "
     "Copy data from src to dst in the most efficient way possible. If follow_symlinks is not set and src is a "
     "symbolic link, a new symlink will be created instead of copying the file it points to. copy data from file-like "
     "object fsrc to file-like object fdst If follow_symlinks is not set, symlinks aren't followed if and only if "
     "both `src` and `dst` are symlinks. If `lchmod` isn't available (e.g. Linux) this method does nothing. Copy the "
     "permission bits, last access time, last modification time, and flags from `src` to `dst`. On Linux, copystat() "
     "also copies the \"extended attributes\" where possible. The file contents, owner, and group are unaffected. "
     "`src` and `dst` are path-like objects or path names given as strings. If the optional flag `follow_symlinks` is "
     "not set, symlinks aren't followed if and only if both `src` and `dst` are symlinks. Recursively copy a "
     "directory tree and return the destination directory. If exception(s) occur, an Error is raised with a list of "
     "reasons. If the optional symlinks flag is true, symbolic links in the source tree result in symbolic links in "
     "the destination tree; if it is false, the contents of the files pointed to"),
    "Basic message object for the email package object model.",
    ("A message object is defined as something that has a bunch of RFC 2822 headers and a payload. It may optionally "
     "have an envelope header (a.k.a. Unix-From or From_ header). If the message is a container (i.e. a multipart or "
     "a message/rfc822), then the payload is a list of Message objects, otherwise it is a string."),
    ("Message objects implement part of the `mapping' interface, which assumes there is exactly one occurrence of the "
     "header per message. Some headers do in fact appear multiple times (e.g. Received) and for those headers, you "
     "must use the explicit API to set or get all the headers. Not all of the mapping methods are implemented."),
    "<intro stuff goes here> <other stuff, too>",
    ("Note: this enforcement is applied by the HTTPConnection class. The HTTPResponse class does not enforce this "
     "state machine, which implies sophisticated clients may accelerate the request/response pipeline. Caution should "
     "be taken, though: accelerating the states beyond the above pattern may imply knowledge of the server's "
     "connection-close behavior for certain requests. For example, it is impossible to tell whether the server will "
     "close the connection UNTIL the response headers have been read; this means that further requests cannot be "
     "placed into the pipeline until it is known that the server will NOT be closing the connection."),
    ("A message object is defined as something that has a bunch of RFC 2822 headers and a payload. It may optionally "
     "have an envelope header (a.k.a. Unix-From or From_ header). If the message is a container (i.e. a multipart or "
     "a message/rfc822), then the payload is a list of Message objects, otherwise it is a string."),
    ("In addition, read(), readinto() and write() may raise BlockingIOError if the underlying raw stream is in "
     "non-blocking mode and not ready; unlike their raw counterparts, they will never return None."),
    ("Logical State __state __response ------------- ------- ---------- Idle _CS_IDLE None Request-started "
     "_CS_REQ_STARTED None Request-sent _CS_REQ_SENT None Unread-response _CS_IDLE <response_class> "
     "Req-started-unread-response _CS_REQ_STARTED <response_class> Req-sent-unread-response _CS_REQ_SENT "
     "<response_class> Common base class for all non-exit exceptions. A message object is defined as something that "
     "has a bunch of RFC 2822 headers and a payload. It may optionally have an envelope header (a.k.a. Unix-From or "
     "From_ header). If the message is a container (i.e. a multipart or a message/rfc822), then the payload is a list "
     "of Message objects, otherwise it is a string. Message objects implement part of the `mapping' interface, which "
     "assumes there is exactly one occurrence of the header per message. Some headers do in fact appear multiple "
     "times (e.g. Received) and for those headers, you must use the explicit API to set or get all the headers. Not "
     "all of the mapping methods are implemented. The main difference with RawIOBase is that the read() method "
     "supports omitting the size argument, and does not have a default implementation that defers to readinto(). In "
     "addition, read(), readinto() and write() may raise BlockingIOError if the underlying raw stream is in "
     "non-blocking mode and not ready; unlike their raw counterparts, they will never return None."),
    ("A typical implementation should not inherit from a RawIOBase implementation, but wrap one. This class allows "
     "communication via SSL. Parses only RFC2822 headers from a file pointer. email Parser wants to see strings "
     "rather than bytes. But a TextIOWrapper around self.rfile would buffer too many bytes from the stream, bytes "
     "which we later need to read as bytes. So we read the correct bytes here, as bytes, for email Parser to parse."),
)


# ---------------------------------------------------------------------------------------------------- images
CALIBRATION_IMAGE_PHOTOS: tuple[str, ...] = (
    "brick.png", "camera.png", "cell.png", "coins.png", "grass.png", "gravel.png", "horse.png",
    "hubble_deep_field.jpg", "ihc.png", "motorcycle_left.png", "motorcycle_right.png", "page.png", "retina.jpg")
"""Photographs of scikit-image's ``data`` folder (shipped in the wheel; scikit-image's ``data/README.txt`` gives
their sources and licences) that calibrate the INT8 image encoder (``ov_engine.image_encoder_int8``). None of them is
a photograph of the fidelity set (``runtime.workload.photo_names``: astronaut, coffee, chelsea, rocket, china,
flower), so fidelity is measured on images disjoint from these."""
CALIBRATION_CROP_BOXES: tuple[tuple[float, float, float, float], ...] = (
    (0.0, 0.0, 1.0, 1.0), (0.0, 0.0, 0.6, 0.6), (0.4, 0.4, 1.0, 1.0), (0.2, 0.1, 0.8, 0.7), (0.0, 0.4, 0.6, 1.0),
    (0.4, 0.0, 1.0, 0.6), (0.25, 0.25, 0.75, 0.75))
"""Crop boxes as (left, top, right, bottom) fractions of the photograph."""
CALIBRATION_IMAGE_SIDES: tuple[int, ...] = (128, 160, 224, 288, 384, 512)
"""Longer side of each crop in pixels (512 is scaled to the 384-px bucket like a large request image)."""
CALIBRATION_ASPECTS: tuple[float, ...] = (1.0, 4 / 3, 3 / 4)
"""Width / height of the crops."""


@dataclass(frozen=True)
class CalibrationCrop:
    """One calibration image: ``box`` (fractions) of ``photo``, resized to ``width`` x ``height`` pixels."""

    photo: str
    box: tuple[float, float, float, float]
    width: int
    height: int


def calibration_image_crops() -> tuple[CalibrationCrop, ...]:
    """The fixed calibration crops of the INT8 image encoder: every photograph of :data:`CALIBRATION_IMAGE_PHOTOS`
    at every side of :data:`CALIBRATION_IMAGE_SIDES` (13 x 6 = 78), box and aspect cycling by index (no random state,
    so every machine gets the same list)."""
    crops = []
    for i, photo in enumerate(CALIBRATION_IMAGE_PHOTOS):
        for j, side in enumerate(CALIBRATION_IMAGE_SIDES):
            aspect = CALIBRATION_ASPECTS[(i + 2 * j) % len(CALIBRATION_ASPECTS)]
            width, height = (side, round(side / aspect)) if aspect >= 1 else (round(side * aspect), side)
            crops.append(CalibrationCrop(photo, CALIBRATION_CROP_BOXES[(i + j) % len(CALIBRATION_CROP_BOXES)],
                                         width, height))
    return tuple(crops)


def calibration_images(max_side_pixels: int = 384) -> list[NDArray[np.float32]]:
    """The encoder inputs of :func:`calibration_image_crops`: each crop resized straight to its resolution bucket
    (``inputs.resolution_bucket``) and normalised as ``inputs.decode_image`` does.

    Returns:
        float32 arrays of shape (1, 3, bucket_h, bucket_w).
    Raises:
        FileNotFoundError: scikit-image (the ``runtime`` extra) is not installed.
    """
    import skimage
    from PIL import Image

    from modalscale.runtime.model.inputs import IMAGE_MEAN, IMAGE_STD, resolution_bucket

    folder = Path(skimage.__file__).resolve().parent / "data"
    sources: dict[str, Image.Image] = {}
    out = []
    for crop in calibration_image_crops():
        if crop.photo not in sources:
            with Image.open(folder / crop.photo) as image:
                sources[crop.photo] = image.convert("RGB")
        src = sources[crop.photo]
        left, top, right, bottom = crop.box
        box = (round(left * src.width), round(top * src.height), round(right * src.width), round(bottom * src.height))
        bucket_h, bucket_w = resolution_bucket(crop.width, crop.height, max_side_pixels)
        pixels = src.crop(box).resize((bucket_w, bucket_h), Image.Resampling.BILINEAR)
        array = (np.asarray(pixels, dtype=np.float32) - IMAGE_MEAN) / IMAGE_STD
        out.append(np.ascontiguousarray(array.transpose(2, 0, 1))[None])
    return out


def calibration_images_digest() -> str:
    """12 hex digits of SHA-256 over the crop list (part of the INT8 image IR's cache key)."""
    return hashlib.sha256(repr(calibration_image_crops()).encode()).hexdigest()[:12]
